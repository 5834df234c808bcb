"""MarkovCorpus: exact entropies against samples and brute force, Zipf shape, sampling layout, bad arguments."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from tiedemb.data.synthetic import SPECIAL_TOKENS, MarkovCorpus
from tiedemb.errors import UserError


@pytest.fixture(scope="module")
def corpus() -> MarkovCorpus:
    return MarkovCorpus()


@pytest.fixture(scope="module")
def stream(corpus: MarkovCorpus) -> np.ndarray:
    return corpus.sample_documents(400_000, seed=7, mean_length=64)


def dense_transitions(corpus: MarkovCorpus) -> np.ndarray:
    """The full transition matrix over word indices (ids minus the specials), built independently."""
    words = corpus.vocab_size - len(SPECIAL_TOKENS)
    dense = np.zeros((words, words))
    rows = np.repeat(np.arange(words), corpus.next_ids.shape[1])
    np.add.at(dense, (rows, corpus.next_ids.ravel() - len(SPECIAL_TOKENS)), corpus.next_probs.ravel())
    return dense


def entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def dense_stationary(dense: np.ndarray) -> np.ndarray:
    """Solve pi (P - I) = 0 with sum(pi) = 1 by least squares: no power iteration involved."""
    n = len(dense)
    system = np.vstack([dense.T - np.eye(n), np.ones((1, n))])
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    return np.linalg.lstsq(system, rhs, rcond=None)[0]


def within_document_pairs(corpus: MarkovCorpus, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = (tokens[:-1] != corpus.sep_token_id) & (tokens[1:] != corpus.sep_token_id)
    return tokens[:-1][keep], tokens[1:][keep]


def log_prob(corpus: MarkovCorpus, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """log P(nxt | prev) for arrays of word ids; -inf where nxt never follows prev."""
    rows = prev - len(SPECIAL_TOKENS)
    probs = np.concatenate(
        [
            (
                corpus.next_probs[rows[at : at + 4096]]
                * (corpus.next_ids[rows[at : at + 4096]] == nxt[at : at + 4096, None])
            ).sum(1)
            for at in range(0, len(rows), 4096)
        ]
    )
    with np.errstate(divide="ignore"):
        return np.log(probs)


def test_sampled_nll_and_repeats_match_the_exact_values(corpus: MarkovCorpus, stream: np.ndarray) -> None:
    prev, nxt = within_document_pairs(corpus, stream)
    log_probs = log_prob(corpus, prev, nxt)
    assert np.isfinite(log_probs).all(), "every sampled transition must be one the chain allows"
    # 400k tokens: the standard error of the mean NLL is a few thousandths of a nat.
    assert -log_probs.mean() == pytest.approx(corpus.entropy_rate, abs=0.02)
    assert (prev == nxt).mean() == pytest.approx(corpus.repeat_rate, abs=0.0015)
    assert corpus.repeat_rate == pytest.approx(corpus.repeat_probability, abs=1e-9)


def test_stationary_distribution_is_stationary(corpus: MarkovCorpus) -> None:
    pi = corpus.stationary
    assert pi.shape == (corpus.vocab_size,)
    assert pi.sum() == pytest.approx(1.0, abs=1e-12)
    assert (pi[: len(SPECIAL_TOKENS)] == 0).all() and (pi[len(SPECIAL_TOKENS) :] > 0).all()
    rows = np.repeat(np.arange(len(corpus.next_ids)), corpus.next_ids.shape[1])
    pushed = np.bincount(
        corpus.next_ids.ravel(), pi[rows + len(SPECIAL_TOKENS)] * corpus.next_probs.ravel(), minlength=corpus.vocab_size
    )
    assert np.abs(pushed - pi).sum() < 1e-10
    assert np.allclose(corpus.next_probs.sum(axis=1), 1.0)


def test_unigram_frequencies_follow_zipf(corpus: MarkovCorpus) -> None:
    ranked = np.sort(corpus.stationary[len(SPECIAL_TOKENS) :])[::-1]
    ranks = np.arange(1, len(ranked) + 1)
    chosen = slice(9, len(ranked) // 2)
    slope = np.polyfit(np.log(ranks[chosen]), np.log(ranked[chosen]), 1)[0]
    assert slope == pytest.approx(-corpus.zipf_exponent, abs=0.05)
    flatter = MarkovCorpus(vocab_size=1000, successors=32, zipf_exponent=0.8, seed=3)
    ranked = np.sort(flatter.stationary[len(SPECIAL_TOKENS) :])[::-1]
    ranks = np.arange(1, len(ranked) + 1)
    slope = np.polyfit(np.log(ranks[9:500]), np.log(ranked[9:500]), 1)[0]
    assert slope == pytest.approx(-0.8, abs=0.05)


def test_entropies_are_ordered(corpus: MarkovCorpus) -> None:
    assert 0 < corpus.mlm_bound < corpus.entropy_rate < corpus.unigram_entropy < math.log(corpus.vocab_size)
    # A few nats of context-free uncertainty are removed by the previous token.
    assert corpus.unigram_entropy - corpus.entropy_rate > 1.0


@pytest.mark.parametrize(
    "successors, repeat_probability, zipf_exponent",
    [(6, 0.05, 1.1), (34, 0.0, 1.1), (3, 0.2, 1.1), (10, 0.01, 3.0), (5, 0.0, 0.0)],
)
def test_brute_force_on_a_small_vocabulary(successors: int, repeat_probability: float, zipf_exponent: float) -> None:
    corpus = MarkovCorpus(
        vocab_size=40,
        successors=successors,
        zipf_exponent=zipf_exponent,
        repeat_probability=repeat_probability,
        seed=11,
    )
    dense = dense_transitions(corpus)
    assert np.count_nonzero(dense, axis=1).max() <= successors + 1
    pi = dense_stationary(dense)
    assert np.allclose(pi, corpus.stationary[len(SPECIAL_TOKENS) :], atol=1e-10)
    assert corpus.entropy_rate == pytest.approx(sum(pi[i] * entropy(dense[i]) for i in range(len(pi))), abs=1e-9)
    assert corpus.unigram_entropy == pytest.approx(entropy(pi), abs=1e-9)
    joint = pi[:, None, None] * dense[:, :, None] * dense[None, :, :]  # (x_{t-1}, x_t, x_{t+1})
    exact = entropy(joint.ravel()) - entropy(joint.sum(axis=1).ravel())
    assert corpus.mlm_bound == pytest.approx(exact, abs=1e-9)
    assert corpus.repeat_rate == pytest.approx(float(pi @ np.diag(dense)), abs=1e-12)


def test_mlm_bound_matches_the_sampled_two_sided_nll() -> None:
    corpus = MarkovCorpus(vocab_size=40, successors=8, seed=5)
    dense = dense_transitions(corpus)
    two_step = dense @ dense
    words = corpus.sample_documents(300_000, seed=2) - len(SPECIAL_TOKENS)
    left, middle, right = words[:-2], words[1:-1], words[2:]
    inside = (left >= 0) & (middle >= 0) & (right >= 0)  # all three in one document
    left, middle, right = left[inside], middle[inside], right[inside]
    nll = -np.log(dense[left, middle] * dense[middle, right] / two_step[left, right])
    assert nll.mean() == pytest.approx(corpus.mlm_bound, abs=0.02)


def test_stream_layout(corpus: MarkovCorpus, stream: np.ndarray) -> None:
    assert stream.dtype == np.int64 and stream.shape == (400_000,)
    assert stream.min() >= 0 and stream.max() < corpus.vocab_size
    specials = np.isin(stream, [corpus.pad_token_id, corpus.unk_token_id, corpus.cls_token_id, corpus.mask_token_id])
    assert not specials.any()
    separators = np.flatnonzero(stream == corpus.sep_token_id)
    assert stream[0] != corpus.sep_token_id
    lengths = np.diff(np.concatenate([[-1], separators])) - 1
    assert lengths.min() >= 1, "no empty documents"
    assert lengths.mean() == pytest.approx(64, rel=0.1)
    assert lengths.std() > 30, "lengths vary (geometric)"
    assert len(corpus.sample_documents(12_345, seed=1)) == 12_345
    assert len(corpus.sample_documents(0, seed=1)) == 0


def test_document_starts_follow_the_stationary_distribution(corpus: MarkovCorpus) -> None:
    tokens = corpus.sample_documents(200_000, seed=4, mean_length=4)
    starts = tokens[1:][tokens[:-1] == corpus.sep_token_id]
    top = corpus.stationary[len(SPECIAL_TOKENS)]
    assert (starts == len(SPECIAL_TOKENS)).mean() == pytest.approx(top, abs=0.02)


def test_determinism(corpus: MarkovCorpus) -> None:
    again = MarkovCorpus()
    assert np.array_equal(again.next_ids, corpus.next_ids) and np.array_equal(again.next_probs, corpus.next_probs)
    first = corpus.sample_documents(5_000, seed=3)
    assert np.array_equal(first, again.sample_documents(5_000, seed=3))
    assert not np.array_equal(first, corpus.sample_documents(5_000, seed=4))
    other = MarkovCorpus(seed=1)
    assert not np.array_equal(other.next_ids, corpus.next_ids)
    assert not np.array_equal(other.sample_documents(5_000, seed=3), first)


def test_a_vocabulary_too_small_for_the_special_tokens_is_refused() -> None:
    with pytest.raises(UserError, match="vocab_size=15 must be an integer >= 16"):
        MarkovCorpus(vocab_size=15)


def test_the_default_corpus_is_pinned() -> None:
    """The Quick start trains on these exact tokens (README's figures depend on them): the corpus
    with every default and the first training blocks PretrainData draws (seed corpus_seed + 1)."""
    stream = MarkovCorpus().sample_documents(1 << 16, seed=1)
    digest = hashlib.sha256(stream.astype("<i8").tobytes()).hexdigest()
    assert digest == "c3a8cea5e5535b3449cfb4d4533525263b9ce17918b9d2660e8ccbd999fa5b5f"
