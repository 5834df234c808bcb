"""The project's remedies applied to a built transformers model (docs/science.md §1, nn/heads.py).

- ``untie``: a fresh output matrix drawn as the table was (the model's own init std);
- ``scaled_init``: the tied table redrawn with σ = (ln n)/d_e (``tied_scaled_init``'s rule), so
  e^{dσ} = n; the model runs again, since its input changes too;
- ``shuffle``: the halves of the vector meeting the tied table swapped (``tied_shuffle``'s
  half_swap, parameter-free), which needs an even width;
- ``orth``: a fresh orthogonal map on that vector before the tied table (``tied_orth``).

The untie, shuffle and orth remedies change only the head, so their logits are recomputed from
the vector that met the output matrix in the model's own pass; the bias, the output scale (already
in that vector) and the soft-cap stay the model's. Every remedy is for a tied head: an untied
model has none to apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tiedemb.theory import token_std
from tiedemb.weights.audit.architecture import Architecture, predict
from tiedemb.weights.audit.measure import Measurement, head_logits, measure, scored_loss
from tiedemb.weights.audit.tokens import Batch

REMEDIES = {
    "untie": "a fresh output matrix, drawn as the table",
    "scaled_init": "the tied table drawn with σ = (ln n)/d_e",
    "shuffle": "the vector's halves swapped before the tied table",
    "orth": "an orthogonal map before the tied table",
}
HEAD_OF = {"untie": "untied", "scaled_init": None, "shuffle": "tied_shuffle", "orth": "tied_orth"}


@dataclass
class RemedyResult:
    name: str
    predicted: float | None = None  # the theory's, near identity
    predicted_with_branches: float | None = None
    measured: float | None = None
    branch_ratio: float | None = None
    not_applicable: str | None = None


def why_not(name: str, arch: Architecture) -> str | None:
    """Why a remedy cannot be applied to this architecture, or None."""
    if not arch.tied:
        return "the model's head is not tied"
    if name == "shuffle" and arch.table_width % 2:
        return f"the half swap needs an even width; the vector meeting the table has {arch.table_width}"
    return None


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _features(name: str, features: Tensor, seed: int) -> Tensor:
    """What meets the table under a head remedy (the untie remedy leaves it as it is)."""
    width = features.shape[-1]
    if name == "shuffle":
        first, second = features.chunk(2, dim=-1)
        features = torch.cat((second, first), dim=-1)
    elif name == "orth":
        q, r = torch.linalg.qr(torch.randn(width, width, generator=_generator(seed)))
        features = features @ (q * torch.sign(torch.diagonal(r)))  # a uniformly drawn orthogonal map
    return features


@torch.no_grad()
def apply_remedies(model: Any, arch: Architecture, batch: Batch, base: Measurement, seed: int) -> list[RemedyResult]:
    """Each remedy alone on the same model and batch; ``scaled_init`` last, as it redraws the table."""
    results: dict[str, RemedyResult] = {}
    head = model.get_output_embeddings()
    for name in sorted(REMEDIES, key=lambda name: name == "scaled_init"):  # the redraw last
        reason = why_not(name, arch)
        if reason is not None:
            results[name] = RemedyResult(name, not_applicable=reason)
        elif name == "scaled_init":
            results[name] = _scaled_init(model, arch, batch)
        else:
            weight = head.weight
            if name == "untie":
                weight = torch.randn(weight.shape, generator=_generator(seed)) * arch.token_std
            features = _features(name, base.head_input.float(), seed)
            loss, _ = scored_loss(head_logits(features, weight, head.bias, arch.softcap), batch)
            results[name] = _result(name, arch, batch, loss, base.branch_ratio, HEAD_OF[name], None)
    return [results[name] for name in REMEDIES]


def _scaled_init(model: Any, arch: Architecture, batch: Batch) -> RemedyResult:
    sigma = token_std("tied_scaled_init", arch.vocab_size, arch.table_width, arch.token_std)
    table = model.get_input_embeddings()
    table.weight.normal_(0.0, sigma)
    if getattr(table, "padding_idx", None) is not None:
        table.weight[table.padding_idx].zero_()  # as transformers draws it
    after = measure(model, arch.family, batch)
    return _result("scaled_init", arch, batch, after.loss, after.branch_ratio, None, sigma)


def _result(
    name: str, arch: Architecture, batch: Batch, loss: float, ratio: float, head: str | None, std: float | None
) -> RemedyResult:
    rate = batch.repeat_rate
    near = predict(arch, repeat_rate=rate, head=head, token_std=std).loss
    counted = predict(arch, repeat_rate=rate, head=head, token_std=std, branch_ratio=ratio).loss
    return RemedyResult(name, near, counted, loss, ratio)
