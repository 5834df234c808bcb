"""One forward pass of the fresh model: its initial loss, how often it predicts the token it reads,
and how large the residual branches' output is beside the embedding.

Hooks record the stream where the blocks start (the embedding's output: token vectors, input
scale, added positions), where it ends (the final norm's input, or a post-norm encoder's output),
and the vector that meets the output matrix, so the remedies can recompute the logits from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tiedemb.weights.audit.families import Family
from tiedemb.weights.audit.tokens import Batch


@dataclass
class Measurement:
    loss: float
    copy_rate: float  # the share of scored positions whose top logit is the id read there
    branch_ratio: float  # |stream end - stream start| / |stream start|
    head_input: Tensor  # what met the output matrix, (batch, positions, width)


def _hidden(args: tuple, kwargs: dict) -> Tensor:
    value = kwargs.get("hidden_states", args[0] if args else None)
    return value


def _output(value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return value[0]


def scored_loss(logits: Tensor, batch: Batch) -> tuple[float, float]:
    """The mean cross-entropy over the scored positions, and the share of them predicting the read id."""
    scored = batch.scored
    chosen = logits[scored].float()
    loss = F.cross_entropy(chosen, batch.targets[scored])
    copies = chosen.argmax(dim=-1) == batch.current[scored]
    return float(loss), float(copies.float().mean())


@torch.no_grad()
def measure(model: Any, family: Family, batch: Batch) -> Measurement:
    seen: dict[str, Tensor] = {}

    def first(name: str):
        def hook(module, args, kwargs):
            seen.setdefault(name, _hidden(args, kwargs))

        return hook

    def last(name: str):
        def hook(module, args, kwargs, output):
            seen[name] = _output(output)

        return hook

    def pre(name: str):
        def hook(module, args, kwargs):
            seen[name] = _hidden(args, kwargs)

        return hook

    handles = [model.get_submodule(family.layers)[0].register_forward_pre_hook(first("start"), with_kwargs=True)]
    if family.final_norm:
        handles.append(model.get_submodule(family.final_norm).register_forward_pre_hook(pre("end"), with_kwargs=True))
    else:
        handles.append(model.get_submodule(family.stream_end).register_forward_hook(last("end"), with_kwargs=True))
    head = model.get_output_embeddings()
    handles.append(head.register_forward_pre_hook(pre("head"), with_kwargs=True))
    try:
        logits = model(**batch.inputs).logits
    finally:
        for handle in handles:
            handle.remove()
    start, end = seen["start"].float(), seen["end"].float()
    if not family.final_norm:
        # A post-norm stream is renormalised after every block (and ALBERT's starts unnormalised, behind
        # its embedding's projection): compare the two ends at the same scale, each position's rms 1.
        start, end = _unit_rms(start), _unit_rms(end)
    ratio = float((end - start).norm() / start.norm())
    loss, copy_rate = scored_loss(logits, batch)
    return Measurement(loss=loss, copy_rate=copy_rate, branch_ratio=ratio, head_input=seen["head"])


def _unit_rms(x: Tensor) -> Tensor:
    return x / x.pow(2).mean(dim=-1, keepdim=True).sqrt().clamp_min(1e-12)


def head_logits(features: Tensor, weight: Tensor, bias: Tensor | None, softcap: float | None) -> Tensor:
    """The logits from what meets the output matrix: the matrix, its bias, then the soft-cap."""
    logits = F.linear(features, weight, bias)
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    return logits
