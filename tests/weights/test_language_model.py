"""PretrainModule from transformers BERT weights: BertForMaskedLM with its head, BertModel with a fresh one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from bert_helpers import TINY_BERT, pair_batch, save_tiny_bert
from transformers import BertForMaskedLM

from tiedemb import PretrainModule
from tiedemb.errors import UserError


def save_tiny_masked_lm(folder: Path, **overrides) -> BertForMaskedLM:
    """A random BertForMaskedLM saved with save_pretrained, with non-trivial norms and biases."""
    return save_tiny_bert(folder, BertForMaskedLM, **overrides)


def logits_of(module: PretrainModule, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return module.eval()(**batch).logits


def test_bert_for_masked_lm_gives_the_same_logits_in_tiedemb_as_in_transformers(tmp_path):
    theirs = save_tiny_masked_lm(tmp_path / "mlm", hidden_act="gelu")
    ours = PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(tmp_path / "mlm"))
    # every architecture and head setting was left unset: all are the pretrained model's
    assert ours.hparams.hidden_size == 48 and ours.hparams.num_layers == 3 and ours.hparams.embedding_dim == 48
    assert (
        ours.config.head,
        ours.config.head_bias,
        ours.config.head_activation,
        ours.config.head_norm,
        ours.config.output_bias,
    ) == ("tied_orth", True, "gelu", True, True)
    assert ours.model.head.decoder.weight is ours.model.embedding.token.weight  # still tied
    batch = pair_batch()
    with torch.no_grad():
        expected = theirs(**batch).logits
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(logits_of(ours, batch)[mask], expected[mask], atol=1e-4, rtol=0)


def test_bert_model_gives_the_encoder_and_the_configured_head_starts_fresh(tmp_path):
    bert = save_tiny_bert(tmp_path / "bert")
    ours = PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(tmp_path / "bert"), head="untied")
    assert ours.config.head == "untied" and not ours.config.output_bias  # the user's head, the defaults' bias
    batch = pair_batch()
    with torch.no_grad():
        expected = bert(**batch).last_hidden_state
        hidden = ours.eval().model.encode(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[mask], expected[mask], atol=1e-4, rtol=0)
    default_head = PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(tmp_path / "bert"))
    assert (
        default_head.config.head == "tied"
        and default_head.model.head.decoder.weight is default_head.model.embedding.token.weight
    )


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"hidden_size": 64}, "model.hidden_size=64 does not fit the pretrained BERT model"),
        ({"head": "tied"}, "model.head='tied' does not fit"),
        ({"head_norm": False}, "model.head_norm=False does not fit"),
        ({"embedding_dim": 16}, "model.embedding_dim=16 does not fit"),
        ({"objective": "clm"}, "cannot be trained with model.objective='clm'"),
        ({"output_scale": 0.5}, "cannot be trained with model.output_scale=0.5"),
        ({"embedding_scale": "sqrt_d"}, "cannot be trained with model.embedding_scale='sqrt_d'"),
        ({"norm_position": "pre"}, "model.norm_position='pre' does not fit the pretrained BERT model"),
        ({"activation": "relu"}, "model.activation='relu' does not fit the pretrained BERT model"),
        ({"embedding_norm": False}, "model.embedding_norm=False does not fit the pretrained BERT model"),
    ],
)
def test_settings_that_contradict_the_pretrained_model_are_refused_in_one_message(tmp_path, settings, named):
    save_tiny_masked_lm(tmp_path / "mlm")
    with pytest.raises(UserError, match=named.replace("(", r"\(").replace(")", r"\)")) as error:
        PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(tmp_path / "mlm"), **settings)
    assert "\n" not in str(error.value)


def test_a_tiedemb_checkpoint_file_or_a_missing_folder_is_not_a_pretrained_bert(tmp_path):
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(b"x")
    with pytest.raises(UserError, match="--ckpt_path"):
        PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(ckpt))
    with pytest.raises(UserError, match="does not exist"):
        PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(tmp_path / "nothing"))


def test_without_pretrained_the_defaults_are_unchanged_and_recorded():
    module = PretrainModule(vocab_size=40, hidden_size=16, num_heads=2, num_layers=1, intermediate_size=32)
    assert module.hparams.head == "tied" and module.hparams.output_bias is False
    assert module.hparams.norm_position == "post" and module.hparams.embedding_dim is None  # None: the hidden size
    assert module.hparams_initial.head == "tied"  # what the loggers record
    with pytest.raises(UserError, match="model.vocab_size must be set"):
        PretrainModule(hidden_size=16, num_heads=2)


def test_a_reloaded_checkpoint_does_not_read_the_pretrained_folder_again(tmp_path):
    import shutil

    import lightning as L

    save_tiny_masked_lm(tmp_path / "mlm")
    module = PretrainModule(vocab_size=TINY_BERT["vocab_size"], pretrained=str(tmp_path / "mlm"))
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(tmp_path / "saved.ckpt")
    shutil.rmtree(tmp_path / "mlm")
    reloaded = PretrainModule.load_from_checkpoint(tmp_path / "saved.ckpt")
    batch = pair_batch()
    torch.testing.assert_close(logits_of(reloaded, batch), logits_of(module, batch))
