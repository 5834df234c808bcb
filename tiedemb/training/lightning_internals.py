"""The places tiedemb reaches into Lightning's private state, each for want of a public API.

Every one is listed in docs/architecture.md ("Private touch points") with the reason no public API
serves; tests/test_private_touch_points.py fails, naming it, when a Lightning upgrade renames or
reshapes one, instead of letting the behaviour change silently. The text of jsonargparse's errors
(``tiedemb.training.arguments``) is the one other.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint


def stop_after_this_step(trainer: L.Trainer, stop: bool = True) -> None:
    """Have the fit stop after the current step as on SIGTERM (``SIGTERMException``), or take that back.

    Lightning reads this flag (``trainer.received_sigterm``, public to read only) after every
    training and validation batch; its own SIGTERM handler is the only public way to set it.
    """
    trainer._signal_connector.received_sigterm = stop


def save_last_checkpoint(callback: ModelCheckpoint, trainer: L.Trainer) -> None:
    """Write ``callback``'s ``last`` checkpoint now, as ``ModelCheckpoint`` itself does.

    The same file name and version counter (``last.ckpt``, ``last-v1.ckpt``), ``last_model_path``
    set before the save so that the checkpoint's callback state names it, the previous one removed.
    """
    callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))


def saved_this_step(callback: ModelCheckpoint, trainer: L.Trainer) -> bool:
    """Whether ``callback`` writes nothing now: saved at this step already, or not fitting."""
    return callback._should_skip_saving_checkpoint(trainer)


def saves_at_train_epoch_end(callback: ModelCheckpoint, trainer: L.Trainer) -> bool:
    """Whether ``callback`` saves at the end of a training epoch rather than after a validation."""
    return callback._should_save_on_train_epoch_end(trainer)
