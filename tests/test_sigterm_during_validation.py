"""A SIGTERM that comes during a validation in ``fit`` stops it after the current batch (Lightning's
rule); that state is not saved, as a resumed run would log every later metric a step late
(``training/checkpoints.py``): the newest checkpoint before it is the one to resume.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from run_dirs import run_checkpoint

from tiedemb.cli import main

ROOT = Path(__file__).resolve().parents[1]


class SigtermInFirstValidation(Callback):
    """Sends SIGTERM at the first batch of a validation of the fit (the first, or the one named); counts
    that validation's batches."""

    def __init__(self, validation: int = 1) -> None:
        self.sent = False
        self.batches_after_signal = 0
        self.validation = validation

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.validation -= 1

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.sanity_checking or self.validation > 0:
            return
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        self.batches_after_signal += 1


@pytest.mark.end_to_end
def test_a_sigterm_during_validation_saves_nothing_and_leaves_the_earlier_checkpoint(tmp_path, capsys):
    cli = main(
        [
            "--config",
            str(ROOT / "configs" / "tied.yaml"),
            "--config",
            str(ROOT / "configs" / "scale" / "tiny.yaml"),
            "--trainer.logger=false",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.limit_val_batches=3",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    probe = SigtermInFirstValidation(validation=2)
    cli.trainer.callbacks.append(probe)
    with pytest.raises(SIGTERMException):
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert probe.batches_after_signal == 1  # Lightning stops after the batch the signal came in
    assert cli.trainer.global_step == 6  # in the validation of step 6 (val_check_interval 3)
    err = capsys.readouterr().err
    assert "SIGTERM during a validation: the state is not saved" in err and "saved the state" not in err
    assert torch.load(run_checkpoint(tmp_path), weights_only=True)["global_step"] == 3


@pytest.mark.end_to_end
def test_after_a_validation_with_no_last_checkpoint_the_state_at_the_signal_is_said_to_be_unsaved(tmp_path, capsys):
    """A plain ModelCheckpoint writes last.ckpt only when its metric improved (a learning rate of 0: only
    at the first validation). A signal after a later validation saves nothing: written after that step,
    the checkpoint would make the resumed run log every later metric a step late (training/checkpoints.py)."""
    plain = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"monitor": "val/loss", "save_last": True},
    }
    cli = main(
        [
            "--config",
            str(ROOT / "configs" / "tied.yaml"),
            "--config",
            str(ROOT / "configs" / "scale" / "tiny.yaml"),
            "--model.learning_rate=0",
            "--trainer.max_steps=9",
            "--trainer.limit_val_batches=1",  # the signal in its last batch: the validation completes
            f"--trainer.callbacks=[{json.dumps(plain)}]",
            "--trainer.logger=false",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    cli.trainer.callbacks.append(SigtermInFirstValidation(validation=2))
    with pytest.raises(SIGTERMException):
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 6  # stopped after the step of the second validation (val_check_interval 3)
    err = capsys.readouterr().err
    assert "SIGTERM: the state after step 6 is not saved (ModelCheckpoint wrote no last checkpoint" in err
    assert torch.load(run_checkpoint(tmp_path), weights_only=True)["global_step"] == 3
