"""Embedding analyses on matrices with known spectra and known geometry."""

from __future__ import annotations

import math

import pytest
import torch

from tiedemb.errors import UserError
from tiedemb.experiments.analysis import (
    analyse,
    analyse_checkpoint,
    effective_rank,
    isotropy,
    main,
    parse_pairs,
    synonym_ids,
)


def with_spectrum(singular_values: list[float], rows: int = 40, seed: int = 0) -> torch.Tensor:
    """A rows x len(values) matrix U diag(values) V^T with random orthonormal U and V."""
    generator = torch.Generator().manual_seed(seed)
    width = len(singular_values)
    u, _ = torch.linalg.qr(torch.randn(rows, width, generator=generator, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(width, width, generator=generator, dtype=torch.float64))
    return u @ torch.diag(torch.tensor(singular_values, dtype=torch.float64)) @ v.T


def test_effective_rank_of_known_spectra():
    assert effective_rank(with_spectrum([1.0] * 8)) == pytest.approx(8.0, rel=1e-9)
    assert effective_rank(with_spectrum([2.0, 2.0, 2.0, 0.0, 0.0])) == pytest.approx(3.0, rel=1e-9)
    p = torch.tensor([3.0, 1.0], dtype=torch.float64) / 4.0
    assert effective_rank(with_spectrum([3.0, 1.0])) == pytest.approx(math.exp(-(p * p.log()).sum().item()), rel=1e-9)
    assert effective_rank(torch.zeros(4, 3)) == 0.0
    assert effective_rank(with_spectrum([5.0] + [0.0] * 6)) == pytest.approx(1.0)


def test_isotropy_is_one_for_spread_vectors_and_small_for_a_shared_direction():
    # +-e_k for every axis: Z(c) is the same for every eigenvector
    axes = torch.cat([torch.eye(6), -torch.eye(6)])
    assert isotropy(axes) == pytest.approx(1.0, abs=1e-9)
    # one shared offset of 3 along e_1: Z(e_1) ~ e^3 Z(c) for the others (either sign of the eigenvector)
    shared = torch.randn(500, 6, generator=torch.Generator().manual_seed(0)) * 0.01 + torch.tensor([3.0, 0, 0, 0, 0, 0])
    assert isotropy(shared) == pytest.approx(math.exp(-3.0), rel=0.01)


class WordTokenizer:
    """Each known word is one token; anything else is two."""

    def __init__(self, words: list[str]) -> None:
        self.ids = {word: number for number, word in enumerate(words)}

    def encode(self, word: str, add_special_tokens: bool = False) -> list[int]:
        return [self.ids[word]] if word in self.ids else [0, 0]


def test_synonym_cosine_uses_single_token_pairs_only():
    tokenizer = WordTokenizer(["[PAD]", "good", "great", "big", "large", "other"])
    pairs = [("good", "great"), ("big", "large"), ("begin", "start")]
    assert synonym_ids(tokenizer, pairs).tolist() == [[1, 2], [3, 4]]
    matrix = torch.randn(6, 16, generator=torch.Generator().manual_seed(1))
    matrix[2] = matrix[1] * 2.0  # great = 2 x good: cosine 1
    matrix[4] = -matrix[3]  # large = -big: cosine -1
    result = analyse(matrix, tokenizer, pairs, excluded_ids=[0])
    assert result.synonym_pairs == 2 and result.synonym_cosine == pytest.approx(0.0, abs=1e-6)
    assert result.embedding_dim == 16 and result.vocab_size == 6
    assert analyse(matrix).synonym_cosine is None


def test_parse_pairs():
    assert parse_pairs("good:great, big:large") == [("good", "great"), ("big", "large")]
    with pytest.raises(UserError, match="not a pair"):
        parse_pairs("good-great")


def test_analysis_of_a_checkpoint_file_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"model.embedding.token.weight": with_spectrum([1.0] * 4, rows=30).float()}}, path)
    assert analyse_checkpoint(path).effective_rank == pytest.approx(4.0, rel=1e-4)
    assert main([str(path)]) == 0
    assert "effective rank        4.0" in capsys.readouterr().out
    torch.save({"state_dict": {"other": torch.zeros(2)}}, tmp_path / "bad.ckpt")
    assert main([str(tmp_path / "bad.ckpt")]) == 2
    assert "no token embedding" in capsys.readouterr().err
