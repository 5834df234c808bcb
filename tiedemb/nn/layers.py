"""The norms and activations a config can name, built from their names.

``tiedemb.nn.config`` lists the names and refuses any other; the tables here hold one entry per
name (a test checks that they agree), so the blocks and heads never validate a name themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATION_FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "relu": F.relu,
    "tanh": torch.tanh,
    "silu": F.silu,
}
"""``model.activation`` / ``model.head_activation`` -> function; ``"none"`` (heads only) has no entry."""

NORM_CLASSES: dict[str, type[nn.Module]] = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    return NORM_CLASSES[kind](dim, eps=eps)
