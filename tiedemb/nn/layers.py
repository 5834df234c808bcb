"""What the model files share: the norms and activations a config can name (``tiedemb.nn.config``
refuses any other; a test checks that the two agree), how a linear layer or a norm is drawn, and the
label that marks "no loss here"."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORE_INDEX = -100
"""A label that takes no part in the loss (the Hugging Face and ``F.cross_entropy`` convention)."""

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


def init_norms(module: nn.Module) -> None:
    """Every norm inside ``module`` back to gain 1, bias 0."""
    for norm in module.modules():
        if isinstance(norm, (nn.LayerNorm, nn.RMSNorm)):
            if norm.weight is not None:
                nn.init.ones_(norm.weight)
            if getattr(norm, "bias", None) is not None:
                nn.init.zeros_(norm.bias)


def init_linear(linear: nn.Linear, std: float) -> None:
    """Weight from N(0, std) (exactly 0 when std is 0), bias 0."""
    if std == 0.0:
        nn.init.zeros_(linear.weight)
    else:
        nn.init.normal_(linear.weight, mean=0.0, std=std)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)
