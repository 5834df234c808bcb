"""Narrowing embedding tables: Eckart–Young error, shared projection, module wiring."""

from __future__ import annotations

import pytest
import torch

from tiedemb.weights.narrow import factorise_tables


def test_energy_weighting_is_the_plain_svd_of_the_stacked_tables():
    torch.manual_seed(0)
    token, position, segment = torch.randn(50, 16), torch.randn(20, 16), torch.randn(2, 16)
    narrowed = factorise_tables([token, position, segment], None, rank=6, weighting="energy")
    assert [t.shape for t in narrowed.tables] == [(50, 6), (20, 6), (2, 6)]
    assert narrowed.projection.shape == (16, 6)  # nn.Linear(6 -> 16).weight
    stacked = torch.cat([token, position, segment])
    lifted = torch.cat(narrowed.tables) @ narrowed.projection.T
    error = ((stacked.double() - lifted.double()) ** 2).sum()
    assert all(table.dtype == torch.float32 for table in narrowed.tables)  # fitted in float64, kept float32
    discarded = float((torch.linalg.svdvals(stacked.double())[6:] ** 2).sum())  # Eckart-Young: the least error
    assert abs(error.item() - discarded) < 1e-4 * error.item()
    # the kept shares add up to what the discarded singular values leave
    energies = [float(t.double().norm() ** 2) for t in (token, position, segment)]
    kept = sum(share * energy for share, energy in zip(narrowed.kept, energies))
    assert kept == pytest.approx(sum(energies) - discarded, rel=1e-4)


@pytest.mark.parametrize("weighting", ["balanced", "energy"])
def test_full_width_reproduces_the_tables_exactly(weighting):
    torch.manual_seed(0)
    tables = [torch.randn(50, 16), torch.randn(20, 16), torch.randn(2, 16)]
    narrowed = factorise_tables(tables, None, rank=16, weighting=weighting)
    torch.testing.assert_close(
        torch.cat(narrowed.tables) @ narrowed.projection.T, torch.cat(tables), atol=1e-5, rtol=1e-5
    )
    assert narrowed.kept == pytest.approx([1.0, 1.0, 1.0])


def made_up_tables(width: int = 96) -> list[torch.Tensor]:
    """A big token table spread over every direction and a small, smooth position table (a few
    sinusoids, as learned position tables tend to be): the shape of BERT-like embeddings."""
    generator = torch.Generator().manual_seed(0)
    token = torch.randn(4000, width, generator=generator, dtype=torch.float64)
    steps = torch.arange(128, dtype=torch.float64)[:, None]
    waves = torch.cat(
        [torch.sin(steps / 10 ** (i / 4)) for i in range(8)] + [torch.cos(steps / 10 ** (i / 4)) for i in range(8)],
        dim=1,
    )
    position = 0.1 * waves @ torch.randn(16, width, generator=generator, dtype=torch.float64)
    segment = torch.randn(2, width, generator=generator, dtype=torch.float64)
    return [token, position, segment]


def test_balanced_narrowing_keeps_the_positions_that_a_plain_svd_destroys():
    tables = made_up_tables()
    plain = factorise_tables(tables, None, rank=24, weighting="energy")
    balanced = factorise_tables(tables, None, rank=24, weighting="balanced")
    # the token rows outweigh the positions: a plain SVD spends the basis on them
    assert plain.kept[1] < 0.6
    assert balanced.kept[1] >= 0.95 and balanced.kept[2] >= 0.95
    # for a modest cost in token energy (an independent check: energy of the token rows' projection)
    token = tables[0]
    assert balanced.kept[0] == pytest.approx(float((balanced.tables[0].double() ** 2).sum() / (token**2).sum()))
    assert plain.kept[0] - balanced.kept[0] < 0.1


def test_an_existing_projection_is_composed_not_replaced():
    """A factorised checkpoint (d_e 16 -> hidden 40) narrowed to 16 keeps table @ P^T; to 8 approximates it."""
    torch.manual_seed(0)
    token, projection = torch.randn(60, 16), torch.randn(40, 16)
    narrowed = factorise_tables([token], projection, rank=16)
    torch.testing.assert_close(narrowed.tables[0] @ narrowed.projection.T, token @ projection.T, atol=1e-4, rtol=1e-4)
    narrowed = factorise_tables([token], projection, rank=8)
    assert narrowed.projection.shape == (40, 8)
