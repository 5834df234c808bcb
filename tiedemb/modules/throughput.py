"""Tokens per second, model FLOPs per second and MFU, measured by Lightning's ``ThroughputMonitor``.

The monitor times the batches and averages over a window; what it cannot know is what a batch
costs. Both modules publish it as ``flops_per_batch``, the count of ``tiedemb.modules.flops``
(masked positions only for MLM, the [CLS] row for a classifier), and a batch's tokens are its
``input_ids`` entries, padding included, since the model computes those positions too.

Logged at the Trainer's ``log_every_n_steps`` once the window is full, per device and, with more
than one process, for all of them (``train/items_per_sec``, ``train/flops_per_sec``):

* ``train/device/items_per_sec``: tokens per second;
* ``train/device/flops_per_sec``: model FLOPs per second;
* ``train/device/mfu``: that over the device's peak: Lightning's table of accelerators for the
  run's precision, or a peak given as ``model.peak_flops`` (or the callback's ``peak_flops``), which
  also covers a GPU the table does not name (such as the plain "NVIDIA H200": 989e12);
* ``train/device/samples_per_sec``, ``train/device/batches_per_sec`` and running totals.

Validation and test batches are timed too (``validate/…``, ``test/…``, forward FLOPs only), and
the time spent validating is kept out of the training rates.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.utilities import rank_zero_only

FLOPS_PER_SEC = "train/device/flops_per_sec"
MFU = "train/device/mfu"


def batch_sequences(batch: Any) -> int:
    return int(batch["input_ids"].shape[0])


def batch_tokens(batch: Any) -> int:
    return int(batch["input_ids"].numel())


class ModelThroughput(ThroughputMonitor):
    """``ThroughputMonitor`` counting tokens, with the module's FLOPs and a peak that can be given.

    Args:
        peak_flops: the device's peak in FLOP/s for MFU. Unset: the module's ``peak_flops``
            setting, else Lightning's table of accelerators for the run's precision. No MFU when
            none applies (a CPU, a GPU Lightning's table does not name).
        window_size: batches the rates are averaged over; the first rates appear once this many
            batches have run.
    """

    def __init__(self, peak_flops: float | None = None, window_size: int = 10) -> None:
        super().__init__(batch_size_fn=batch_sequences, length_fn=batch_tokens, window_size=window_size)
        self.peak_flops = peak_flops

    def own_peak(self, pl_module: L.LightningModule) -> float | None:
        """The peak given for MFU, which replaces the one Lightning's table gives (``available_flops``)."""
        given = self.peak_flops or getattr(pl_module, "hparams", {}).get("peak_flops")
        return float(given) if given else None

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        # Lightning's MFU uses the peak its table gives the device; a given peak divides the FLOP rate it
        # has just logged, at the same step (ThroughputMonitor and the module's logs both go at this batch).
        peak = self.own_peak(pl_module)
        rate = trainer.logged_metrics.get(FLOPS_PER_SEC)
        if peak and rate is not None:
            pl_module.log(MFU, float(rate) / peak, on_step=True, on_epoch=False, rank_zero_only=True)
