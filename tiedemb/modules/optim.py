"""The default optimiser: AdamW (no decay on biases and norms) with warmup, then decay."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from tiedemb.options import changed_from_default, no_effect

LrDecay = Literal["linear", "cosine", "constant"]  # how the learning rate falls after warmup


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Matrices decay; vectors (biases, norm gains) do not. Shared parameters appear once."""
    decay, no_decay = [], []
    for parameter in model.parameters():  # parameters() de-duplicates the tied matrix
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def check_schedule(decay: str, min_lr_ratio: float) -> None:
    """Refuse a floor the schedule never decays to (the module's signature refuses an unknown decay)."""
    if decay == "constant" and changed_from_default(min_lr_ratio, 0.0):
        raise no_effect(
            "model.min_lr_ratio",
            min_lr_ratio,
            "with model.lr_decay='constant': the learning rate never decays towards it",
        )


def warmup_then_decay(total_steps: int, warmup_steps: int, decay: str, min_ratio: float):
    """Multiplier on the peak learning rate at each optimiser step."""
    warmup_steps = min(warmup_steps, max(total_steps - 1, 0))

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if decay == "constant" or total_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        shape = 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * shape

    return multiplier


def adamw_with_schedule(
    model: nn.Module,
    *,
    learning_rate: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    total_steps: int,
    warmup_steps: int,
    decay: str,
    min_lr_ratio: float,
) -> dict:
    """What ``configure_optimizers`` returns: AdamW plus a per-step LambdaLR, which
    ``LearningRateMonitor`` logs as ``lr/pg1`` (matrices) and ``lr/pg2`` (vectors)."""
    groups = parameter_groups(model, weight_decay)
    # The fused kernel passes over each parameter, gradient and moment once per step, the multi-tensor
    # path several times (benchmarks/RESULTS.md); it exists for CPU and CUDA float tensors.
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for group in groups for p in group["params"])
    optimizer = torch.optim.AdamW(
        groups, lr=learning_rate, betas=betas, eps=eps, fused=fused, foreach=None if fused else True
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_then_decay(total_steps, warmup_steps, decay, min_lr_ratio)
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "lr"}}
