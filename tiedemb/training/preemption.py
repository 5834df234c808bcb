"""A run stopped by SIGTERM or Ctrl-C saves its state at the signal, so that ``--ckpt_path=last`` resumes that step.

Lightning notes a SIGTERM (``trainer.received_sigterm``), lets the current training step complete,
and then raises ``SIGTERMException``, which reaches every callback's ``on_exception`` before the
run ends. ``SaveOnPreemption`` writes the ``last`` checkpoint of every ``ModelCheckpoint`` with
``save_last`` there (``checkpoints.write_last``), through the same writer as the periodic ones (atomic, never non-finite
weights; ``checkpoints.AtomicCheckpointIO``). It does so for SIGTERM only: after any other
exception the state may be half-way through a step, and the newest periodic checkpoint is the
consistent one. ``tiedemb.cli.main`` then exits with ``PREEMPTED_EXIT`` (143).

Ctrl-C (SIGINT) takes the same path during ``fit``: the first one asks the run to stop after the
current step and save it, as SIGTERM does (Python's default would raise ``KeyboardInterrupt``
wherever the run is, half-way through a step, and the state since the last periodic checkpoint
would be lost); a second Ctrl-C stops at once. ``tiedemb.cli.main`` exits with
``INTERRUPTED_EXIT`` (130). A process that ignores SIGINT, or has its own handler for it, keeps it.

A signal that comes during a validation in ``fit`` is held back until that validation has ended.
Lightning would stop after the current validation batch, and a run resumed from there skips the
rest of that validation: its metrics, the checkpoints they select and early stopping would differ
from an uninterrupted run's. So the validation completes (its metrics are logged, the periodic
checkpoints written) and the run stops after it, at the end of the same step.

Two places in a fit are not states a run can be resumed from exactly, and a signal there is
dealt with so that the state saved is one. After a step that validated, Lightning's counter of
logged steps has been raised once more than its own checkpoints (written at the validation) hold,
and a run resumed from a checkpoint written after it would log every later metric a step late; so
nothing is written then: the ``last`` checkpoint that validation wrote is that step's state, and
Lightning resumes it as its own. (``ResumableCheckpoint`` writes it at every validation; a plain
``ModelCheckpoint`` only when its metric improved, and otherwise the state at the signal is not
saved, which is said.) After an epoch's last step the epoch has been counted as completed but its
batches not reset, and a run resumed from there would run one batch and skip the rest of the next
epoch; so a signal in an epoch's last step is held back until the next epoch's first step has
ended, one step later than elsewhere.
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

    The one reach into Lightning's private state (docs/architecture.md, "Private touch points";
    tests/test_private_touch_points.py fails, naming it, when an upgrade renames it). Lightning
    reads this flag (``trainer.received_sigterm``, public to read only) after every training and
    validation batch; its own SIGTERM handler is the only public way to set it.
    """
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
