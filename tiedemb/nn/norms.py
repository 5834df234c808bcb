"""The two normalisations a config can name."""

from __future__ import annotations

from torch import nn


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    raise ValueError(f"unknown norm {kind!r}")
