"""The progress bar's epoch label when only ``max_steps`` bounds a run.

Every config here bounds training by steps, and Lightning then sets ``max_epochs`` to -1; its
rich progress bar (up to 2.6.6 at least) labels the bar "Epoch 0/-2", the last epoch index
computed from that -1. ``StepBoundRichProgressBar`` drops the "/-2"; with ``max_epochs`` set, the
label is Lightning's. The CLI gives the bar Lightning picked by default this class, keeping its
settings (``use_step_bound_label``).
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


class StepBoundRichProgressBar(RichProgressBar):
    """Lightning's ``RichProgressBar``, labelled "Epoch N" when no epoch bound is set."""

    # _get_train_description is Lightning's private label maker (2.x; see pyproject's upper bound).
    def _get_train_description(self, current_epoch: int) -> str:
        label = super()._get_train_description(current_epoch)
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs < 1:
            unbounded = f"Epoch {current_epoch}/{max_epochs - 1}"
            if label.startswith(unbounded):
                label = f"Epoch {current_epoch}" + label[len(unbounded) :]
        return label


def use_step_bound_label(trainer: L.Trainer) -> None:
    """Give the trainer's rich progress bar, if it is Lightning's own class, the label above."""
    bar = trainer.progress_bar_callback
    if type(bar) is RichProgressBar:
        bar.__class__ = StepBoundRichProgressBar  # same state, same settings: only the label differs
