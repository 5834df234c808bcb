"""Tokens per second, model FLOPs per second and MFU, measured by Lightning's ``ThroughputMonitor``.

A batch costs the module's ``flops_per_batch``, PaLM's count (Chowdhery et al. 2022, app. B): 6N
FLOPs per row a weight matrix of N entries multiplies in a training step, attention 12 * L * T * d per
token (causal in full), lookups and vectors nothing; the output head and the last block's tail count
only at the positions projected (CLM: all, MLM: the masked ones, a classifier: [CLS]). Evaluation is a
third. Tokens are ``input_ids`` entries, padding included. MFU divides by Lightning's table of
accelerators, or by ``model.peak_flops`` (or the callback's ``peak_flops``) where it names no peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.utilities import rank_zero_only
from torch import nn

FLOPS_PER_SEC = "train/device/flops_per_sec"
MFU = "train/device/mfu"


@dataclass(frozen=True)
class MatmulWeights:
    """Entries of the weight matrices a token meets, split by where they are applied."""

    per_token: int  # applied at every position: embedding projection, encoder blocks but the tail below
    per_output: int  # applied at each projected position: last block's out + FFN, head (vocabulary matrix, classifier)
    num_layers: int
    hidden_size: int

    @classmethod
    def of(cls, model: nn.Module) -> MatmulWeights:
        """Count the ``nn.Linear`` weights of a ``tiedemb.nn.Transformer`` or ``SequenceClassifier``
        (the built modules, so that every head variant counts right)."""
        last = model.encoder.blocks[-1]
        heads = [model.head] if hasattr(model, "head") else [model.pooler, model.classifier]
        tail = sum(_linear_weights(part) for part in (last.attention.out, last.ffn))
        return cls(
            per_token=_linear_weights(model.embedding) + _linear_weights(model.encoder) - tail,
            per_output=tail + sum(_linear_weights(part) for part in heads if part is not None),
            num_layers=model.config.num_layers,
            hidden_size=model.config.hidden_size,
        )

    def training_flops(self, batch_size: int, seq_len: int, output_positions: int | None = None) -> float:
        """FLOPs of one forward + backward pass; ``output_positions``: the positions whose logits are
        computed (MLM: the masked ones), None for all of them."""
        tokens = batch_size * seq_len
        outputs = tokens if output_positions is None else output_positions
        dense = 6 * (tokens * self.per_token + outputs * self.per_output)
        attention = 12 * self.num_layers * seq_len * self.hidden_size * tokens
        return float(dense + attention)

    def forward_flops(self, batch_size: int, seq_len: int, output_positions: int | None = None) -> float:
        """FLOPs of the forward pass alone (evaluation): a third of ``training_flops``."""
        return self.training_flops(batch_size, seq_len, output_positions) / 3


def _linear_weights(module: nn.Module) -> int:
    # A tied matrix is one Parameter but two uses (a lookup and a product); only the product is
    # a Linear, so the lookup never counts.
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def batch_sequences(batch: Any) -> int:
    return int(batch["input_ids"].shape[0])


def batch_tokens(batch: Any) -> int:
    return int(batch["input_ids"].numel())


class ModelThroughput(ThroughputMonitor):
    """``ThroughputMonitor`` counting tokens, with the module's FLOPs and a peak that can be given.

    Args:
        peak_flops: the device's peak in FLOP/s for MFU. Unset: the module's ``peak_flops``, else
            Lightning's table for the run's precision (no MFU on a CPU or a GPU it does not name).
        window_size: batches the rates are averaged over.
    """

    def __init__(self, peak_flops: float | None = None, window_size: int = 10) -> None:
        super().__init__(batch_size_fn=batch_sequences, length_fn=batch_tokens, window_size=window_size)
        self.peak_flops = peak_flops

    def own_peak(self, pl_module: L.LightningModule) -> float | None:
        """The peak given for MFU, which replaces the one Lightning's table gives."""
        given = self.peak_flops or pl_module.hparams.get("peak_flops")
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
