"""Truncated SVD of embedding tables: Eckart–Young error, shared projection, module wiring."""

from __future__ import annotations

import pytest
import torch

from tiedemb.weights.narrow import factorise_tables, truncated_svd


@pytest.mark.parametrize("rank", [1, 5, 16, 31, 32])
def test_rank_k_error_is_the_discarded_singular_values(rank):
    torch.manual_seed(0)
    matrix = torch.randn(200, 32, dtype=torch.float64) @ torch.diag(torch.linspace(3.0, 0.1, 32, dtype=torch.float64))
    svd = truncated_svd(matrix, rank)
    error = ((matrix - svd.left @ svd.right) ** 2).sum()
    discarded = (torch.linalg.svdvals(matrix)[rank:] ** 2).sum()
    torch.testing.assert_close(error, discarded, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(svd.discarded_energy(), discarded)
    assert svd.left.shape == (200, rank) and svd.right.shape == (rank, 32)


def test_float32_tables_factorise_in_float64_and_stay_float32():
    torch.manual_seed(0)
    matrix = torch.randn(300, 24)
    svd = truncated_svd(matrix, 8)
    assert svd.left.dtype == svd.right.dtype == torch.float32
    error = ((matrix.double() - svd.left.double() @ svd.right.double()) ** 2).sum()
    assert abs(error.item() - svd.discarded_energy().item()) < 1e-4 * error.item()


def test_tables_share_one_projection_and_project_back_to_the_originals():
    torch.manual_seed(0)
    token, position, segment = torch.randn(50, 16), torch.randn(20, 16), torch.randn(2, 16)
    tables, projection, svd = factorise_tables([token, position, segment], None, rank=6)
    assert [t.shape for t in tables] == [(50, 6), (20, 6), (2, 6)]
    assert projection.shape == (16, 6)  # nn.Linear(6 -> 16).weight
    stacked = torch.cat([token, position, segment])
    lifted = torch.cat(tables) @ projection.T
    error = ((stacked.double() - lifted.double()) ** 2).sum()
    assert abs(error.item() - svd.discarded_energy().item()) < 1e-4 * error.item()
    # full rank reproduces the tables exactly
    tables, projection, _ = factorise_tables([token, position, segment], None, rank=16)
    torch.testing.assert_close(torch.cat(tables) @ projection.T, stacked, atol=1e-5, rtol=1e-5)


def test_an_existing_projection_is_composed_not_replaced():
    """A factorised checkpoint (d_e 16 -> hidden 40) narrowed to 16 keeps table @ P^T; to 8 approximates it."""
    torch.manual_seed(0)
    token, projection = torch.randn(60, 16), torch.randn(40, 16)
    tables, new_projection, _ = factorise_tables([token], projection, rank=16)
    torch.testing.assert_close(tables[0] @ new_projection.T, token @ projection.T, atol=1e-4, rtol=1e-4)
    tables, new_projection, _ = factorise_tables([token], projection, rank=8)
    assert new_projection.shape == (40, 8)
