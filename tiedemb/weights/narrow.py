"""Narrowing a pretrained embedding to a smaller d_e: the tables fitted into one shared basis.

Fine-tuning with ``embedding_dim`` (d_e) below the width of a pretrained embedding needs narrow
tables and a projection whose product approximates the pretrained ones. Token, position and
segment tables are summed before the projection, so they must share one projection, and hence one
basis ``V_k`` (d × k, orthonormal columns): each table ``T`` becomes ``T V_k`` (its least-squares
fit in that basis) and the projection ``P`` becomes ``P V_k``, so ``(T V_k)(P V_k)ᵀ = T V_k V_kᵀ Pᵀ``
is the table's part inside the basis, lifted as before.

The basis is the top-k right singular vectors of the tables stacked, each table weighted first:
``balanced`` (the default) scales every table to unit Frobenius norm, so that the token table's
many rows do not crowd out the positions (docs/science.md, "Narrowing must not destroy
positions"); ``energy`` is the plain truncated SVD, by Eckart–Young the best rank-k fit of all rows
together. ``Narrowing.kept`` is each table's share of its energy the basis keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tiedemb.errors import UserError

if TYPE_CHECKING:
    from tiedemb.weights.source import PretrainedWeights

#: The tables summed before the projection, which therefore share it.
TABLES = ("embedding.token.weight", "embedding.position.weight", "embedding.segment.weight")
PROJECTION = "embedding.projection.weight"


@dataclass
class Narrowing:
    """Narrow tables, the projection that lifts them, and the energy each table kept."""

    tables: list[Tensor]
    projection: Tensor
    kept: list[float]  # per table: ||T V_k||² / ||T||², 1.0 for an all-zero table


def factorise_tables(
    tables: list[Tensor], projection: Tensor | None, rank: int, weighting: str = "balanced"
) -> Narrowing:
    """Narrow embedding tables (rows, d) to width ``rank`` and the projection that lifts them;
    ``projection``: the pretrained weight (hidden, d) after the tables, ``None`` when they are hidden wide."""
    originals = [table.detach().double() for table in tables]
    norms = [float(table.norm()) for table in originals]
    scale = [1.0 / norm if weighting == "balanced" and norm > 0 else 1.0 for norm in norms]
    # The basis V_k (d, rank): the top right singular vectors, computed in float64 for accuracy.
    stacked = torch.cat([table * factor for table, factor in zip(originals, scale)], dim=0)
    basis = torch.linalg.svd(stacked, full_matrices=False).Vh[:rank].T
    narrow = [table @ basis for table in originals]
    kept = [float(fitted.norm() ** 2 / norm**2) if norm > 0 else 1.0 for fitted, norm in zip(narrow, norms)]
    dtype = tables[0].dtype
    # x ≈ a V_kᵀ, then the old projection: x Pᵀ ≈ a (P V_k)ᵀ, so the new weight is P V_k.
    new_projection = basis if projection is None else projection.detach().double() @ basis
    return Narrowing([t.to(dtype).contiguous() for t in narrow], new_projection.to(dtype).contiguous(), kept)


def fit_embedding(
    source: PretrainedWeights,
    embedding_dim: int,
    reinit: bool,
    weighting: str = "balanced",
    kept: dict[str, float] | None = None,
) -> dict[str, Tensor]:
    """The source's state with its embedding at width ``embedding_dim`` (or left out when ``reinit``;
    the hidden-wide embedding norm stays); ``kept`` receives each narrowed table's share of energy kept."""
    state = dict(source.state)
    source_de = source.fields["embedding_dim"]
    if reinit:
        for key in (*TABLES, PROJECTION):
            state.pop(key, None)
        return state
    if embedding_dim > source_de:
        raise UserError(
            f"model.embedding_dim={embedding_dim} is wider than the embedding of the pretrained {source.kind} "
            f"{source.origin!r} (d_e {source_de}); SVD can only narrow it. Set model.reinit_embeddings=true "
            "to draw new embeddings instead"
        )
    if embedding_dim == source_de:
        return state
    present = [key for key in TABLES if key in state]
    narrowed = factorise_tables([state[key] for key in present], state.get(PROJECTION), embedding_dim, weighting)
    state.update(zip(present, narrowed.tables))
    state[PROJECTION] = narrowed.projection
    if kept is not None:
        kept.update({key.split(".")[1]: share for key, share in zip(present, narrowed.kept)})
    return state
