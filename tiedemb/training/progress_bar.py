"""The progress bar's labels: "Epoch N" when only ``max_steps`` bounds a run, no logger version.

Every config here bounds training by steps, and Lightning then sets ``max_epochs`` to -1; its
rich progress bar (up to 2.6.6 at least) labels the bar "Epoch 0/-2", the last epoch index
computed from that -1. ``RunProgressBar`` drops the "/-2" from the bar's training task, through
the bar's rich ``Progress`` (``RichProgressBar.progress``, ``train_progress_bar_id``); with
``max_epochs`` set, the label is Lightning's. It also leaves out ``v_num``, the loggers' version.
The CLI gives every run one where the config lists no bar of its own (``TiedembCLI._run_callbacks``);
a bar the config lists keeps its labels.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar


def step_bound_label(label: str, epoch: int, max_epochs: int | None) -> str:
    """``label`` with "Epoch N/-2" read as "Epoch N" when no epoch bound is set (``max_epochs`` below 1)."""
    if max_epochs is None or max_epochs >= 1:
        return label
    return label.replace(f"Epoch {epoch}/{max_epochs - 1}", f"Epoch {epoch}", 1)


class RunProgressBar(RichProgressBar):
    """Lightning's rich bar, labelled "Epoch N" when no epoch bound is set, without the logger's version.

    Lightning shows the loggers' version as ``v_num`` beside the metrics: with a W&B logger that is
    the end of a random run id (``v_num: 9h_0``), which says nothing the run's folder does not. The
    label is set where the bar sets its training task's: at the start of an epoch and, after a resume
    in the middle of one, the first batch.
    """

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        _relabel(self, trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args)
        _relabel(self, trainer)


def _relabel(bar: RichProgressBar, trainer: L.Trainer) -> None:
    if bar.progress is None or bar.train_progress_bar_id is None:
        return
    label = bar.train_progress_bar.description
    relabelled = step_bound_label(label, trainer.current_epoch, trainer.max_epochs)
    if relabelled != label:
        bar.progress.update(bar.train_progress_bar_id, description=relabelled)
