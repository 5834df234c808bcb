"""tiedemb weights in BERT's layout: the names, the multiplied-out embedding, the exported config."""

from __future__ import annotations

import pytest
import torch

from tiedemb import PretrainModule
from tiedemb.export import build_model
from tiedemb.weights.bert import bert_to_tiedemb, tiedemb_to_bert
from tiedemb.weights.export_plan import plan_export

SMALL = dict(
    vocab_size=50,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    intermediate_size=32,
    max_position_embeddings=32,
    objective="mlm",
    position="learned",
    norm_position="post",
    dropout=0.0,
    attention_dropout=0.0,
)


def module(**settings) -> PretrainModule:
    torch.manual_seed(0)
    model = PretrainModule(**{**SMALL, **settings}).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a dropped or swapped one cannot go unnoticed
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def test_tiedemb_to_bert_inverts_bert_to_tiedemb():
    state = {
        key.removeprefix("model."): value
        for key, value in module().state_dict().items()
        if key.startswith(("model.embedding.", "model.encoder."))
    }
    back = bert_to_tiedemb(tiedemb_to_bert(state, num_layers=2), num_layers=2)
    assert back.keys() == state.keys()
    for key, value in state.items():
        torch.testing.assert_close(back[key], value, rtol=0, atol=0)


@pytest.mark.parametrize(
    "settings",
    [
        dict(embedding_dim=6, type_vocab_size=2),
        dict(embedding_projection="always", type_vocab_size=0),
        dict(embedding_dim=6, type_vocab_size=0),
    ],
    ids=["d_e<hidden", "projection-at-full-width-no-segments", "d_e<hidden-no-segments"],
)
def test_a_factorised_embedding_multiplied_out_gives_the_same_hidden_states(settings):
    ours = module(**settings)
    plan = plan_export(dict(ours.hparams), ours.state_dict(), "pretrain", None, "test")
    assert plan.model_class == "BertModel" and plan.config["type_vocab_size"] == 2
    assert plan.state["embeddings.word_embeddings.weight"].shape == (50, 16)
    theirs = build_model(plan)
    input_ids = torch.randint(5, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    for types in (torch.zeros_like(input_ids), (torch.arange(9) >= 4).long().expand(2, 9)):
        with torch.no_grad():
            expected = ours.model.encode(input_ids, token_type_ids=types if settings["type_vocab_size"] else None)
            actual = theirs(input_ids=input_ids, token_type_ids=types).last_hidden_state
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_berts_head_becomes_the_masked_lm_head_with_the_decoder_tied_to_the_word_table():
    ours = module(head="tied_orth", head_bias=True, head_activation="gelu", head_norm=True, output_bias=True)
    plan = plan_export(dict(ours.hparams), ours.state_dict(), "pretrain", None, "test")
    assert plan.model_class == "BertForMaskedLM" and plan.config["hidden_act"] == "gelu"
    theirs = build_model(plan)
    assert theirs.cls.predictions.decoder.weight.data_ptr() == theirs.bert.embeddings.word_embeddings.weight.data_ptr()
    input_ids = torch.randint(5, 50, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=input_ids).logits, ours.model(input_ids).logits, atol=1e-5, rtol=0)
