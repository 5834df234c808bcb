"""Dropout whose keep-mask costs less to draw on the CPU.

torch's CPU dropout draws every entry with ``bernoulli_`` (benchmarks/RESULTS.md: about 2.5 times the
cost). Here each int64 word of ``random_()`` gives two int32 halves of 31 uniform bits; an entry is kept
when its bits are at least ``round(p * 2^31)`` (p to within 2^-32). GPUs and ``torch.compile`` keep torch's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_WORD = 2**31


def keep_mask(shape: torch.Size, p: float, device: torch.device | None = None) -> Tensor:
    """A bool tensor of ``shape``, each entry True with probability 1 - p, independently."""
    threshold = round(p * _WORD)
    if threshold >= _WORD:  # not representable in int32, and nothing is kept anyway
        return torch.zeros(shape, dtype=torch.bool, device=device)
    count = math.prod(shape)
    words = torch.empty((count + 1) // 2, dtype=torch.int64, device=device).random_()
    halves = words.view(torch.int32)[:count].bitwise_and_(_WORD - 1)  # (count,), uniform on [0, 2^31)
    return halves.ge(threshold).view(shape)


class _ScaleKept(torch.autograd.Function):
    """x * keep / (1 - p), saving only the bool mask for the backward (as torch's dropout does)."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.ops.aten.native_dropout_backward(x, keep, scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return torch.ops.aten.native_dropout_backward(grad, keep, ctx.scale), None, None


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``F.dropout(x, p, training)``, with the cheaper mask on the CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling() or p == 1.0:
        return F.dropout(x, p, training)
    return _ScaleKept.apply(x, keep_mask(x.shape, p, x.device), 1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """``nn.Dropout`` with ``dropout``'s mask (same ``p``, same state dict: none)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
