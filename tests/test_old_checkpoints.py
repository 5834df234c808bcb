"""Checkpoints written before the package was restructured still load, rebuild and run unchanged.

The files in tests/fixtures/before_restructuring were written by the command line of commit
8cde535 (see make.py there): a two-step tied_orth pretraining run and a two-step MRPC run, with the
outputs of each reloaded model on fixed inputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tiedemb import GlueModule, PretrainModule
from tiedemb.cli import main

ROOT = Path(__file__).resolve().parents[1]
OLD = ROOT / "tests" / "fixtures" / "before_restructuring"
CONFIGS = ROOT / "configs"


ADDED = {
    PretrainModule: {"pretrained": None},
    GlueModule: {"narrowing": "balanced"},
}
"""Options a module gained after these checkpoints were written, with the default a reload gives them."""


def without_added(model) -> dict:
    settings = dict(model.hparams)
    for name, default in ADDED.get(type(model), {}).items():
        assert settings.pop(name) == default, f"{name} is not its default {default!r}"
    return settings


@pytest.fixture(scope="module")
def expected() -> dict[str, torch.Tensor]:
    return torch.load(OLD / "expected_outputs.pt", weights_only=True)


def assert_same_outputs(got: torch.Tensor, saved: torch.Tensor) -> None:
    """Equal to float32 rounding. Bit for bit only on a CPU like the one that wrote them: the matrix
    kernels torch picks for AVX2 and for AVX-512 sum in different orders (seen: 1.8e-7 apart)."""
    torch.testing.assert_close(got, saved, rtol=1.3e-6, atol=1e-5)


def saved_settings(name: str) -> dict:
    """The hyperparameters a checkpoint holds, without LightningCLI's own keys, lists as tuples."""
    saved = torch.load(OLD / name, map_location="cpu", weights_only=True)["hyper_parameters"]
    return {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in saved.items()
        if not key.startswith("_")
    }


def test_a_pretraining_checkpoint_rebuilds_the_same_model(expected):
    model = PretrainModule.load_from_checkpoint(OLD / "pretrain_tied_orth.ckpt", map_location="cpu").eval()
    assert without_added(model) == saved_settings("pretrain_tied_orth.ckpt")
    assert (model.config.head, model.config.hidden_size, model.config.head_activation) == ("tied_orth", 16, "gelu")
    assert model.model.is_tied
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
    assert_same_outputs(logits, expected["pretrain_logits"])


def test_a_glue_checkpoint_rebuilds_the_same_classifier(expected):
    model = GlueModule.load_from_checkpoint(OLD / "glue_mrpc.ckpt", map_location="cpu").eval()
    assert without_added(model) == saved_settings("glue_mrpc.ckpt")
    assert (model.hparams.task, model.hparams.num_labels, model.config.embedding_dim) == ("mrpc", 2, 8)
    ids = expected["input_ids"]
    with torch.no_grad():
        logits = model(ids, torch.ones_like(ids), torch.zeros_like(ids))
    assert_same_outputs(logits, expected["glue_logits"])


@pytest.mark.end_to_end
def test_the_command_line_accepts_an_old_checkpoint_of_the_same_configuration(tmp_path):
    """``--ckpt_path`` vets the checkpoint against the configured model (tiedemb.training.checkpoints)."""
    cli = main(
        [
            "validate",
            "--config",
            str(CONFIGS / "tied_orth.yaml"),
            "--config",
            str(CONFIGS / "scale" / "tiny.yaml"),
            "--model.hidden_size=16",
            "--model.num_heads=2",
            "--model.num_layers=1",
            "--model.intermediate_size=32",
            "--model.head_norm=true",
            "--model.head_bias=true",
            "--model.head_activation=gelu",
            "--data.vocab_size=300",
            "--data.block_size=16",
            "--data.batch_size=2",
            "--data.synthetic_tokens=4096",
            "--data.synthetic_val_tokens=1024",
            "--trainer.limit_val_batches=1",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
            f"--ckpt_path={OLD / 'pretrain_tied_orth.ckpt'}",
        ]
    )
    assert "val/loss" in cli.trainer.callback_metrics
