"""Row selection: the last block finishes only the positions somebody reads.

A masked LM's loss reads the masked positions (about 15%); a classifier reads [CLS] alone. Every
position still feeds attention as keys and values in every block, so the positions kept are exactly
what the full output holds there; the last block just skips the attention output projection,
feed-forward and norms of the others.
"""

from __future__ import annotations

from torch import Tensor

Positions = Tensor | int | None
"""Which positions a block finishes: all (None), flat B * T indices, or one position of every sequence."""


def take_rows(x: Tensor, positions: Positions) -> Tensor:
    """(B, T, hidden) -> (len(positions), hidden) at flat positions ``positions``, (B, hidden) at position
    ``positions`` of every sequence when it is an int; x itself when None."""
    if positions is None:
        return x
    if isinstance(positions, int):
        return x[:, positions]
    return x.reshape(-1, x.shape[-1]).index_select(0, positions)
