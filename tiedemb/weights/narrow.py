"""Narrowing a pretrained embedding to a smaller d_e: truncated SVD, the best rank-k stand-in.

Fine-tuning with ``embedding_dim`` (d_e) below the width of a pretrained embedding needs narrow
tables and a projection whose product approximates the pretrained ones. Token, position and
segment tables are summed before the projection, so they must share one projection: they are
stacked and factorised together, ``E ≈ U_k Σ_k V_kᵀ``. The new tables are the rows of
``U_k Σ_k`` and the projection maps them back through ``V_kᵀ``. By Eckart–Young no rank-k pair
does better in Frobenius norm, and the squared error is the sum of the discarded σ².
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tiedemb.errors import UserError

if TYPE_CHECKING:
    from tiedemb.weights.source import PretrainedWeights

TABLES = ("embedding.token.weight", "embedding.position.weight", "embedding.segment.weight")
"""The tables summed before the projection, which therefore share it."""
PROJECTION = "embedding.projection.weight"


@dataclass
class TruncatedSVD:
    """``matrix ≈ left @ right`` with ``left = U_k Σ_k`` (m × k) and ``right = V_kᵀ`` (k × n)."""

    left: Tensor
    right: Tensor
    singular_values: Tensor  # all of them, descending, so the discarded part stays inspectable

    @property
    def rank(self) -> int:
        return self.left.shape[1]

    def discarded_energy(self) -> Tensor:
        """Sum of the squared singular values left out: the squared Frobenius error."""
        return (self.singular_values[self.rank :] ** 2).sum()


def truncated_svd(matrix: Tensor, rank: int) -> TruncatedSVD:
    """Best rank-``rank`` factorisation of a 2-D ``matrix``, computed in float64 for accuracy."""
    if matrix.ndim != 2:
        raise ValueError(f"expected a matrix, got shape {tuple(matrix.shape)}")
    if not 0 < rank <= min(matrix.shape):
        raise ValueError(f"rank must be in 1..{min(matrix.shape)}, got {rank}")
    u, s, vh = torch.linalg.svd(matrix.detach().double(), full_matrices=False)
    left = (u[:, :rank] * s[:rank]).to(matrix.dtype)
    return TruncatedSVD(left=left, right=vh[:rank].to(matrix.dtype), singular_values=s.to(matrix.dtype))


def factorise_tables(
    tables: list[Tensor], projection: Tensor | None, rank: int
) -> tuple[list[Tensor], Tensor, TruncatedSVD]:
    """Narrow embedding tables to width ``rank`` and the projection that lifts them.

    Args:
        tables: the token / position / segment tables, each (rows, d) with a common width d.
        projection: the pretrained ``nn.Linear`` weight (hidden, d) that follows the tables, or
            ``None`` when the tables are already hidden-wide (d = hidden, identity projection).
        rank: the new width d_e.

    Returns:
        the new tables (rows, rank), the new projection weight (hidden, rank) such that
        ``new_table @ new_projection.T ≈ table @ projection.T``, and the SVD itself.
    """
    stacked = torch.cat([table.detach() for table in tables], dim=0)
    svd = truncated_svd(stacked, rank)
    sizes = [table.shape[0] for table in tables]
    narrow = list(torch.split(svd.left, sizes, dim=0))
    # x ≈ a V_kᵀ, then the old projection: x Pᵀ ≈ a (P V_k)ᵀ, so the new weight is P V_k.
    right_t = svd.right.T  # (d, rank) = V_k
    new_projection = right_t.contiguous() if projection is None else projection.detach() @ right_t
    return [t.contiguous() for t in narrow], new_projection, svd


def fit_embedding(source: PretrainedWeights, embedding_dim: int, reinit: bool) -> dict[str, Tensor]:
    """The source's state with its embedding at width ``embedding_dim`` (or left out when ``reinit``).

    With ``embedding_dim`` below the source's d_e the stacked token/position/segment tables are
    factorised by truncated SVD and the projection becomes the old one times V_k, so that
    projection(new table) ≈ projection(old table). The embedding LayerNorm is hidden-wide and is
    kept either way.
    """
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
    tables, projection, _ = factorise_tables([state[key] for key in present], state.get(PROJECTION), embedding_dim)
    state.update(zip(present, tables))
    state[PROJECTION] = projection
    return state
