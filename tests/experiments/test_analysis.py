"""Embedding analyses on matrices with known spectra and known geometry."""

from __future__ import annotations

import logging
import math
import re

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
    token_counts,
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


@pytest.mark.end_to_end
def test_analysis_of_a_checkpoint_file_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"model.embedding.token.weight": with_spectrum([1.0] * 4, rows=30).float()}}, path)
    assert analyse_checkpoint(path).effective_rank == pytest.approx(4.0, rel=1e-4)
    assert main([str(path)]) == 0
    assert "effective rank        4.0" in capsys.readouterr().out
    torch.save({"state_dict": {"other": torch.zeros(2)}}, tmp_path / "bad.ckpt")
    assert main([str(tmp_path / "bad.ckpt")]) == 2
    assert "no token embedding" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert main([str(tmp_path / "notes.txt")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: checkpoint '{tmp_path / 'notes.txt'}' could not be read")
    assert errors[0].endswith("it is truncated, corrupt or not a Lightning checkpoint")  # not torch's words on mmap
    assert main([str(tmp_path)]) == 2
    assert f"checkpoint '{tmp_path}' is a directory" in capsys.readouterr().err
    pickled = tmp_path / "pickled.ckpt"
    torch.save(
        {
            "state_dict": {"model.embedding.token.weight": with_spectrum([1.0] * 4, rows=30).float()},
            "extra": re.compile("a pickled object"),
        },
        pickled,
    )
    assert main([str(pickled)]) == 2
    assert "pass --weights_only=false" in capsys.readouterr().err
    assert main([str(pickled), "--weights_only=false"]) == 0
    assert "effective rank        4.0" in capsys.readouterr().out


def test_frequency_matched_pairs_draw_tokens_of_the_same_frequency_rank():
    from tiedemb.experiments.analysis import frequency_matched_pairs

    n = 1000
    counts = torch.arange(n, 0, -1)  # id i has rank i: id 0 is the most frequent
    excluded = torch.zeros(n, dtype=torch.bool)
    excluded[:3] = True  # special tokens: never drawn, and ranks start after them
    pairs = torch.tensor([[10, 900], [500, 501]])
    matched = frequency_matched_pairs(pairs, counts, excluded, per_pair=200, window=0.02)
    first, second = matched[:, 0], matched[:, 1]
    assert not torch.isin(matched, torch.tensor([0, 1, 2])).any()
    assert (first[:190] - 10).abs().max() <= 12 and (second[:190] - 900).abs().max() <= 12
    assert (first[-150:] - 500).abs().max() <= 12 and (second[-150:] - 501).abs().max() <= 12
    assert (first != second).all()


def test_frequency_matched_baseline_separates_meaning_from_frequency():
    """Frequent tokens share a direction: uniform random pairs (mostly rare) look unlike each other,
    so against them even an unrelated pair of frequent words looks like synonyms; against pairs of
    matched frequency it does not."""
    from tiedemb.experiments.analysis import frequency_matched_pairs, mean_cosine

    generator = torch.Generator().manual_seed(0)
    n, width = 2000, 32
    matrix = torch.randn(n, width, generator=generator, dtype=torch.float64)
    common = torch.randn(width, generator=generator, dtype=torch.float64)
    matrix[:100] += 3 * common  # the 100 most frequent ids crowd along one direction
    counts = torch.arange(n, 0, -1)
    unrelated_frequent = torch.tensor([[5, 60], [7, 80], [20, 90]])
    uniform = mean_cosine(matrix, torch.randint(n, (4000, 2), generator=generator))
    matched = mean_cosine(matrix, frequency_matched_pairs(unrelated_frequent, counts, torch.zeros(n, dtype=torch.bool)))
    pair_cosine = mean_cosine(matrix, unrelated_frequent)
    assert pair_cosine - uniform > 0.5  # the uniform baseline calls them near-synonyms
    assert abs(pair_cosine - matched) < 0.15  # the matched one does not


def test_effective_rank_as_the_encoder_sees_the_table():
    from tiedemb.experiments.analysis import encoder_input

    table = with_spectrum([1.0] * 6 + [0.0] * 2, rows=50)  # rank 6 in 8 dimensions
    projection = torch.randn(32, 8, dtype=torch.float64)
    rows = encoder_input(table, projection, None, None)
    assert effective_rank(rows) <= 6.0 + 1e-6  # a projection cannot add directions
    assert torch.allclose(rows, table @ projection.T)
    normed = encoder_input(table, projection, torch.ones(32), torch.zeros(32))
    assert torch.allclose(normed.mean(dim=-1), torch.zeros(50, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(normed.pow(2).mean(dim=-1), torch.ones(50, dtype=torch.float64), atol=1e-6)
    rms = encoder_input(table, projection, 2 * torch.ones(32), None)  # RMSNorm: scaled, not centred
    assert torch.allclose(rms.pow(2).mean(dim=-1), 4 * torch.ones(50, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(rms, 2 * rows / rows.pow(2).mean(dim=-1, keepdim=True).sqrt(), atol=1e-9)


def test_token_counts_of_lines_longer_than_the_model_take_them_whole_and_quietly(tmp_path, caplog, tiny_tokenizer_dir):
    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    tokenizer.model_max_length = 512
    word = next(word for word in tokenizer.get_vocab() if word.isalpha() and len(word) > 2)
    (tmp_path / "text.txt").write_text(f"{' '.join([word] * 600)}\n{word}\n", encoding="utf-8")
    transformers_logging.enable_propagation()  # transformers' warnings reach caplog
    try:
        with caplog.at_level(logging.WARNING):
            counts = token_counts(tokenizer, [str(tmp_path / "text.txt")], len(tokenizer))
    finally:
        transformers_logging.disable_propagation()
    assert counts[tokenizer.convert_tokens_to_ids(word)] == 601 and counts.sum() == 601
    assert not [record for record in caplog.records if "indexing errors" in record.getMessage()]
