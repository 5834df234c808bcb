"""The progress bar's epoch label when only ``max_steps`` bounds a run.

Every config here bounds training by steps, and Lightning then sets ``max_epochs`` to -1; its
rich progress bar (up to 2.6.6 at least) labels the bar "Epoch 0/-2", the last epoch index
computed from that -1. ``StepBoundLabel`` drops the "/-2" from the bar's training task, through
the bar's rich ``Progress`` (``RichProgressBar.progress``, ``train_progress_bar_id``); with
``max_epochs`` set, the label is Lightning's. The CLI adds it where the progress bar is
Lightning's own ``RichProgressBar`` (``use_step_bound_label``); a subclass or another bar keeps its label.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, RichProgressBar


def step_bound_label(label: str, epoch: int, max_epochs: int | None) -> str:
    """``label`` with "Epoch N/-2" read as "Epoch N" when no epoch bound is set (``max_epochs`` below 1)."""
    if max_epochs is None or max_epochs >= 1:
        return label
    return label.replace(f"Epoch {epoch}/{max_epochs - 1}", f"Epoch {epoch}", 1)


class StepBoundLabel(Callback):
    """Labels Lightning's rich bar "Epoch N" when no epoch bound is set (see the module).

    It runs after the bar in each hook (the CLI adds it after the Trainer placed the bar), at the
    two places the bar sets its training task's label: the start of an epoch and, after a resume
    in the middle of one, the first batch.
    """

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _relabel(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        _relabel(trainer)


def _relabel(trainer: L.Trainer) -> None:
    bar = trainer.progress_bar_callback
    if not isinstance(bar, RichProgressBar) or bar.progress is None or bar.train_progress_bar_id is None:
        return
    label = bar.train_progress_bar.description
    relabelled = step_bound_label(label, trainer.current_epoch, trainer.max_epochs)
    if relabelled != label:
        bar.progress.update(bar.train_progress_bar_id, description=relabelled)


def use_step_bound_label(trainer: L.Trainer) -> None:
    """Label the trainer's rich progress bar as above, if it is Lightning's own class."""
    if type(trainer.progress_bar_callback) is RichProgressBar and not any(
        isinstance(callback, StepBoundLabel) for callback in trainer.callbacks
    ):
        trainer.callbacks.append(StepBoundLabel())
