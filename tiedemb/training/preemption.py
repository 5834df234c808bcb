"""A run stopped by SIGTERM or Ctrl-C saves its state after the current step (``last``), so that
``--ckpt_path=last`` resumes that step; ``tiedemb.cli.main`` then exits 143 (SIGTERM) or 130 (Ctrl-C).

Lightning notes a SIGTERM, lets the step complete and raises ``SIGTERMException``, which reaches
``SaveOnPreemption.on_exception``; any other exception may leave a step half-done, so only this
one saves. The first Ctrl-C in ``fit`` takes the same path (a second one stops at once).

The state saved is always one Lightning resumes exactly (tests/test_resume.py): a signal during a
validation is held back until it ends; after a step that validated nothing is written (the
``last`` written at that validation is that step's state; a plain ``ModelCheckpoint`` may not have
written one, which is said); a signal in an epoch's last step is held back one step, as the loops
would otherwise skip the rest of the next epoch.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tiedemb.training.checkpoints import write_last


def stop_after_this_step(trainer: L.Trainer, stop: bool = True) -> None:
    """Have the fit stop after the current step as on SIGTERM (``SIGTERMException``), or take that back.

    The one reach into Lightning's private state (docs/architecture.md, "Private touch points")."""
    trainer._signal_connector.received_sigterm = stop


_CTRL_C = threading.Event()
"""Set when Ctrl-C, not SIGTERM, is what the current stop of a fit comes from."""


_SAVED_AT_STOP: list[str] = []
"""The checkpoints the current stop of a fit was saved to (none: nothing to name in the advice)."""


def saved_at_stop() -> list[str]:
    """The files the state was saved to at the signal that stopped the fit (empty when none was)."""
    return list(_SAVED_AT_STOP)


def stop_signal() -> str:
    """What stopped the fit that raised Lightning's ``SIGTERMException``: ``"Ctrl-C"`` or ``"SIGTERM"``."""
    return "Ctrl-C" if _CTRL_C.is_set() else "SIGTERM"


class SaveOnPreemption(Callback):
    """On SIGTERM or Ctrl-C, saves every ``last`` checkpoint at the step the run stopped after (see the module)."""

    def __init__(self) -> None:
        self._held_back = False
        self._previous_handler: Any = None
        self._held_past_epoch_end = False
        self._validated_at: int | None = None  # the step whose validation ended last
        self._saved_at: int | None = None  # the step the newest checkpoint (by any callback) holds

    # -- Ctrl-C: the first one stops after the current step, a second one at once --------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _CTRL_C.clear()
        _SAVED_AT_STOP.clear()
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: self._ctrl_c(trainer))

    def _ctrl_c(self, trainer: L.Trainer) -> None:
        if _CTRL_C.is_set() or trainer.sanity_checking:
            self._restore_handler()
            raise KeyboardInterrupt
        _CTRL_C.set()
        stop_after_this_step(trainer)  # Lightning's own stop after the step (see above)
        if trainer.is_global_zero:
            print("\nCtrl-C: stopping after this step to save it (Ctrl-C again stops at once)", file=sys.stderr)

    def _restore_handler(self) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_handler()

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        # Lightning checks the flag right after this hook (its evaluation loop); it is set again at the end.
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking and trainer.received_sigterm:
            stop_after_this_step(trainer, False)
            self._held_back = True

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved_at = trainer.global_step

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._validated_at = trainer.global_step
        if self._held_back:
            # the training loop stops at the end of this step, as for a signal during the step itself
            stop_after_this_step(trainer)
            self._held_back = False

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and trainer.received_sigterm:
            # Lightning checks the flag right after this hook; see the module for why not here.
            stop_after_this_step(trainer, False)
            self._held_past_epoch_end = True

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._held_past_epoch_end:
            stop_after_this_step(trainer)  # the loop stops after this epoch's first step
            self._held_past_epoch_end = False

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_handler()
        if not isinstance(exception, SIGTERMException):
            return
        what = stop_signal()
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or trainer.fast_dev_run:
            return
        if trainer.validating:  # stopped inside a validation after all (the signal came after the hook above)
            if trainer.is_global_zero:
                print(
                    f"{what} during a validation: the state is not saved at the signal; --ckpt_path=last resumes "
                    "from the newest checkpoint before it",
                    file=sys.stderr,
                )
            return
        savers = [
            callback
            for callback in trainer.checkpoint_callbacks
            if isinstance(callback, ModelCheckpoint) and callback.save_last
        ]
        if not savers:
            if trainer.is_global_zero:
                print(
                    f"{what}: no checkpoint callback keeps a last checkpoint (save_last), so the state at the signal "
                    "is not saved",
                    file=sys.stderr,
                )
            return
        validated = self._validated_at == trainer.global_step  # its checkpoints were written at that validation
        saved = self._saved_at == trainer.global_step
        for callback in savers:
            if not validated:
                write_last(callback, trainer)
            elif not saved:
                if trainer.is_global_zero:
                    print(
                        f"{what}: the state after step {trainer.global_step} is not saved ({type(callback).__name__} "
                        f"wrote no last checkpoint at its validation); --ckpt_path=last resumes from an earlier one",
                        file=sys.stderr,
                    )
                continue
            _SAVED_AT_STOP.append(str(callback.last_model_path))
            if trainer.is_global_zero:
                print(
                    f"{what}: saved the state after step {trainer.global_step} to {callback.last_model_path}",
                    file=sys.stderr,
                )
