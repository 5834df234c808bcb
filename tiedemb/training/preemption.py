"""A fit stopped by SIGTERM saves its state after the current step (``last``), so that ``--ckpt_path=last``
resumes that step; ``tiedemb.cli.main`` then exits 143.

Lightning notes a SIGTERM, lets the step complete and raises ``SIGTERMException``, which reaches
``SaveOnPreemption.on_exception``; any other exception may leave a step half-done, so only this
one saves. Only a state Lightning resumes exactly (tests/test_resume.py) is written: a signal during
a validation, or in an epoch's last step, saves nothing (saved there, the resumed run would log every
later metric a step late, or skip the rest of the next epoch), and after a step that validated the
``last`` written at that validation is that step's state. ``--ckpt_path=last`` then resumes from the
newest checkpoint before the signal.
"""

from __future__ import annotations

import sys
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tiedemb.training.checkpoints import write_last


class SaveOnPreemption(Callback):
    """On SIGTERM, saves every ``last`` checkpoint at the step the run stopped after (see the module)."""

    def __init__(self) -> None:
        self._validated_at: int | None = None  # the step whose validation ended last
        self._saved_at: int | None = None  # the step the newest checkpoint (by any callback) holds

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved_at = trainer.global_step

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._validated_at = trainer.global_step

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        if trainer.sanity_checking or trainer.fast_dev_run:
            return
        validated = self._validated_at == trainer.global_step  # its checkpoints were written at that validation
        if trainer.validating or (trainer.fit_loop.epoch_loop.batch_progress.is_last_batch and not validated):
            where = "during a validation" if trainer.validating else "in an epoch's last step"
            say(trainer, f"SIGTERM {where}: the state is not saved; --ckpt_path=last resumes from an earlier one")
            return
        savers = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.save_last]
        if not savers:
            say(
                trainer,
                "SIGTERM: no checkpoint callback keeps a last checkpoint (save_last), so the state is not saved",
            )
        for callback in savers:
            if not validated:
                write_last(callback, trainer)
            elif self._saved_at != trainer.global_step:
                say(
                    trainer,
                    f"SIGTERM: the state after step {trainer.global_step} is not saved ({type(callback).__name__} "
                    "wrote no last checkpoint at its validation); --ckpt_path=last resumes from an earlier one",
                )
                continue
            say(trainer, f"SIGTERM: saved the state after step {trainer.global_step} to {callback.last_model_path}")


def say(trainer: L.Trainer, line: str) -> None:
    if trainer.is_global_zero:
        print(line, file=sys.stderr)
