"""Tokens per second, model FLOPs per second and MFU, measured by Lightning's ``ThroughputMonitor``.

The monitor times the batches; what a batch costs is the module's ``flops_per_batch``
(``tiedemb.modules.flops``), and its tokens are its ``input_ids`` entries, padding included. MFU
divides by Lightning's table of accelerators, or by a peak given as ``model.peak_flops`` (or the
callback's ``peak_flops``) for a device the table does not name (the plain "NVIDIA H200": 989e12).
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
