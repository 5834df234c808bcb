"""Tokens per second, model FLOPs per second and MFU, measured by Lightning's ``ThroughputMonitor``.

The monitor times the batches and averages over a window; what it cannot know is what a batch
costs. Both modules publish it as ``flops_per_batch``, the count of ``tiedemb.modules.flops``
(masked positions only for MLM, the [CLS] row for a classifier), and a batch's tokens are its
``input_ids`` entries, padding included, since the model computes those positions too.

Logged at the Trainer's ``log_every_n_steps`` once the window is full, per device and, with more
than one process, for all of them (``train/items_per_sec``, ``train/flops_per_sec``):

* ``train/device/items_per_sec``: tokens per second;
* ``train/device/flops_per_sec``: model FLOPs per second;
* ``train/device/mfu``: that over the device's peak (below), where one is known;
* ``train/device/samples_per_sec``, ``train/device/batches_per_sec`` and running totals.

Validation and test batches are timed too (``validate/…``, ``test/…``, forward FLOPs only), and
the time spent validating is kept out of the training rates.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.utilities import rank_zero_only

from tiedemb.modules.flops import device_peak_flops

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
            setting, else Lightning's table of accelerators for the run's precision, else
            tiedemb's dense 16-bit figures (H100, H200, A100), which also name the plain
            "NVIDIA H200" that Lightning's table misses. No MFU when none applies (a CPU).
        window_size: batches the rates are averaged over; the first rates appear once this many
            batches have run.
    """

    def __init__(self, peak_flops: float | None = None, window_size: int = 10) -> None:
        super().__init__(batch_size_fn=batch_sequences, length_fn=batch_tokens, window_size=window_size)
        self.peak_flops = peak_flops

    def own_peak(self, trainer: L.Trainer, pl_module: L.LightningModule) -> float | None:
        """The peak MFU is measured against where Lightning's own (``available_flops``) is not the one."""
        given = self.peak_flops or getattr(pl_module, "hparams", {}).get("peak_flops")
        if given:
            return float(given)
        if self.available_flops:
            return None  # Lightning's table knows the device: its MFU stands
        return device_peak_flops(trainer.strategy.root_device, str(trainer.precision))

    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)
        # Lightning's MFU uses the peak its table gives the device; another peak divides the FLOP rate it
        # has just logged, at the same step (ThroughputMonitor and the module's logs both go at this batch).
        peak = self.own_peak(trainer, pl_module)
        rate = trainer.logged_metrics.get(FLOPS_PER_SEC)
        if peak and rate is not None:
            pl_module.log(MFU, float(rate) / peak, on_step=True, on_epoch=False, rank_zero_only=True)
