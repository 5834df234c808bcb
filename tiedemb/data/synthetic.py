"""The embedded default corpus: a Zipf-distributed first-order Markov language over word ids
``5 .. vocab_size - 1`` (ids 0-4 are BERT-like special tokens), generated because tiedemb ships no text.

Every word lists ``successors`` candidate next words (frequent words preferred) plus itself (taken
with ``repeat_probability``); gamma noise skews each row, and the columns are rescaled until the
stationary distribution follows Zipf's law. The chain being known, so are the best losses: no
causal model beats the entropy rate ``h = sum_i pi_i H(P[i, :])``; a bidirectional model with both
neighbours of a masked token is bounded by ``2 h - H(X_{t+1} | X_{t-1})`` (``mlm_bound``).
"""

from __future__ import annotations

import math

import numpy as np

from tiedemb.errors import UserError

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

_FIRST_WORD = len(SPECIAL_TOKENS)
_MIN_VOCAB = 16
# Gamma shape below 1 makes each word's transition row heavy-headed, which keeps the
# entropy rate a few nats below log(vocab), as in natural text.
_WEIGHT_SHAPE = 0.5
_FIT_ROUNDS = 30
_FIT_STEPS = 3
_FIT_TOLERANCE = 1e-3  # L1 distance of the unigram distribution to the Zipf target
# Bounds the memory of the blockwise work to a few MB per block, small enough for cache.
_BLOCK_ELEMENTS = 1 << 18


def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy in nats along the last axis; zero entries contribute nothing."""
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)


def _draw_successors(rng: np.random.Generator, zipf: np.ndarray, k: int) -> np.ndarray:
    """For every word, ``k`` distinct other words drawn without replacement, ∝ ``zipf``: each row's
    first ``k`` distinct hits of draws with replacement, else (rows that come up short) Gumbel-top-k."""
    m = len(zipf)
    cdf = np.cumsum(zipf)
    cdf[-1] = 1.0
    out = np.empty((m, k), dtype=np.int64)
    todo = np.arange(m)
    for draws in (2 * k + 16, 8 * k + 64):
        short = []
        for chunk in np.array_split(todo, max(1, todo.size * draws // (4 * _BLOCK_ELEMENTS))):
            hits = np.searchsorted(cdf, rng.random((chunk.size, draws)), side="right")
            hits[hits == chunk[:, None]] = -1  # self-transitions come from repeat_probability alone
            order = np.argsort(hits, axis=1, kind="stable")
            ranked = np.take_along_axis(hits, order, axis=1)
            new = np.ones(ranked.shape, dtype=bool)
            new[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
            new &= ranked >= 0
            first = np.empty_like(new)
            np.put_along_axis(first, order, new, axis=1)
            seen = np.cumsum(first, axis=1)
            done = seen[:, -1] >= k
            out[chunk[done]] = hits[done][first[done] & (seen[done] <= k)].reshape(-1, k)
            short.append(chunk[~done])
        todo = np.concatenate(short)
    if todo.size == 0:
        return out
    log_zipf = np.log(zipf)
    for rows in np.array_split(todo, math.ceil(todo.size * m / _BLOCK_ELEMENTS)):
        keys = log_zipf + rng.gumbel(size=(rows.size, m))
        keys[np.arange(rows.size), rows] = -np.inf
        top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
        out[rows] = np.take_along_axis(top, np.argsort(-np.take_along_axis(keys, top, 1), axis=1), 1)
    return out


def _stationary(
    nxt: np.ndarray, probs: np.ndarray, start: np.ndarray, tol: float, max_steps: int = 100_000
) -> tuple[np.ndarray, bool]:
    """Power iteration ``pi <- pi P`` on the sparse rows; returns pi and whether the L1 change fell below ``tol``."""
    # Without self-loops the chain might be periodic; a lazy step (same fixed point) prevents that.
    lazy = bool(np.all(probs[:, 0] == 0))
    flat = nxt.ravel()
    pi = start
    for _ in range(max_steps):
        new = np.bincount(flat, (pi[:, None] * probs).ravel(), minlength=len(pi))
        if lazy:
            new = 0.5 * (new + pi)
        new /= new.sum()
        change = np.abs(new - pi).sum()
        pi = new
        if change < tol:
            return pi, True
    return pi, False


def _transition_rows(weights: np.ndarray, scale: np.ndarray, others: np.ndarray, repeat: float) -> np.ndarray:
    rows = weights * scale[others]
    rows *= (1.0 - repeat) / rows.sum(axis=1, keepdims=True)
    return np.concatenate([np.full((len(rows), 1), repeat), rows], axis=1)


def _fit_to_zipf(
    nxt: np.ndarray, weights: np.ndarray, zipf: np.ndarray, repeat: float
) -> tuple[np.ndarray, np.ndarray]:
    """The transition rows and their exact stationary distribution, each word's weight as a successor
    rescaled (Sinkhorn-like) until that distribution is ~ ``zipf``."""
    others = nxt[:, 1:]
    scale = np.ones(len(zipf))
    pi = zipf
    for _ in range(_FIT_ROUNDS):
        probs = _transition_rows(weights, scale, others, repeat)
        # A few power steps per round suffice: pi and the scales converge together.
        pi, _ = _stationary(nxt, probs, pi, tol=1e-9, max_steps=_FIT_STEPS)
        if np.abs(pi - zipf).sum() < _FIT_TOLERANCE:
            break
        scale = np.clip(scale * zipf / pi, 1e-30, 1e30)
    pi, converged = _stationary(nxt, probs, pi, tol=1e-12)
    if not converged:
        raise RuntimeError("the stationary distribution did not converge")
    return probs, pi


class MarkovCorpus:
    """A Zipf-distributed first-order Markov language with exactly known entropies."""

    pad_token_id = 0
    unk_token_id = 1
    cls_token_id = 2
    sep_token_id = 3
    mask_token_id = 4

    def __init__(
        self,
        vocab_size: int = 4096,
        successors: int = 64,
        zipf_exponent: float = 1.1,
        repeat_probability: float = 0.005,
        seed: int = 0,
    ) -> None:
        if vocab_size < _MIN_VOCAB:  # data.vocab_size: PretrainData's bounds check the rest
            raise UserError(f"vocab_size={vocab_size!r} must be an integer >= {_MIN_VOCAB} (5 ids are special tokens)")
        words = vocab_size - _FIRST_WORD
        self.vocab_size = int(vocab_size)
        self.successors = int(successors)
        self.zipf_exponent = float(zipf_exponent)
        self.repeat_probability = float(repeat_probability)
        self.seed = int(seed)

        rng = np.random.default_rng([self.seed, 0])
        # Word ranks follow id order: w5 is the most frequent word, like a frequency-sorted vocab.
        zipf = np.arange(1, words + 1, dtype=np.float64) ** -self.zipf_exponent
        zipf /= zipf.sum()
        others = _draw_successors(rng, zipf, self.successors)
        # A random cycle through all words, forced into the successor lists, makes every word
        # reachable from every other, so the stationary distribution is unique and positive.
        cycle = rng.permutation(words)
        follower = np.empty(words, dtype=np.int64)
        follower[cycle] = np.roll(cycle, -1)
        missing = ~(others == follower[:, None]).any(axis=1)
        others[missing, -1] = follower[missing]
        weights = rng.gamma(_WEIGHT_SHAPE, size=others.shape)

        # Column 0 is the word itself, so P = r I + (1 - r) Q with every row of Q over `others`.
        nxt = np.concatenate([np.arange(words)[:, None], others], axis=1)
        probs, pi = _fit_to_zipf(nxt, weights, zipf, self.repeat_probability)

        self.next_ids: np.ndarray = nxt + _FIRST_WORD  # (words, successors + 1), column 0 = itself
        self.next_probs: np.ndarray = probs
        self.stationary: np.ndarray = np.concatenate([np.zeros(_FIRST_WORD), pi])  # over all ids
        self.entropy_rate = float(pi @ _entropy(probs))
        self.unigram_entropy = float(_entropy(pi))
        self.repeat_rate = float(pi @ probs[:, 0])
        self.mlm_bound = 2.0 * self.entropy_rate - self._two_step_entropy()
        self._cdf = np.cumsum(probs, axis=1)
        self._cdf[:, -1] = 1.0  # u < 1 always lands in the row despite rounding
        self._start_cdf = np.cumsum(pi)
        self._start_cdf[-1] = 1.0

    def _two_step_entropy(self) -> float:
        """H(X_{t+1} | X_{t-1}) from the sparse rows, aggregating each row's two-step targets."""
        nxt, probs = self.next_ids - _FIRST_WORD, self.next_probs
        words = len(nxt)
        pi = self.stationary[_FIRST_WORD:]
        block = max(1, _BLOCK_ELEMENTS // words)
        total = 0.0
        for start in range(0, words, block):
            stop = min(start + block, words)
            mid = nxt[start:stop]
            weights = (probs[start:stop, :, None] * probs[mid]).reshape(stop - start, -1)
            keys = (np.arange(stop - start)[:, None] * words + nxt[mid].reshape(stop - start, -1)).ravel()
            summed = np.bincount(keys, weights.ravel(), minlength=(stop - start) * words)[keys]
            # weighting log p by each path's share sums to p log p per distinct target
            shares = weights * np.log(np.where(summed > 0, summed, 1.0)).reshape(weights.shape)
            total -= float(pi[start:stop] @ shares.sum(axis=1))
        return total

    def sample_documents(self, num_tokens: int, seed: int, mean_length: int = 128) -> np.ndarray:
        """A stream of exactly ``num_tokens`` ids: documents (stationary starts, geometric lengths of
        mean ``mean_length``) separated by ``sep_token_id``, drawn in parallel lanes, each ending with one."""
        if num_tokens == 0:
            return np.empty(0, dtype=np.int64)
        rng = np.random.default_rng([self.seed, int(seed), 1])
        # Long lanes keep the truncation of each lane's last document rare.
        lanes = math.ceil(num_tokens / max(1024, 16 * mean_length))
        steps = math.ceil(num_tokens / lanes)
        width = self._cdf.shape[1]
        cdf, nxt = self._cdf.ravel(), (self.next_ids - _FIRST_WORD).ravel()
        out = np.empty((lanes, steps), dtype=np.int64)
        state = np.zeros(lanes, dtype=np.int64)
        after_sep = np.ones(lanes, dtype=bool)
        ended = np.zeros(lanes, dtype=bool)
        for t in range(steps):
            u = rng.random(lanes)
            stop = rng.random(lanes) < 1.0 / mean_length
            if t == steps - 1:
                sep = np.ones(lanes, dtype=bool)
            elif t == steps - 2:  # so that the forced final separator never doubles up
                sep = np.zeros(lanes, dtype=bool)
            else:
                sep = ended
            # Inverse-CDF per lane: binary search in that lane's row of cumulative probabilities.
            base = state * width
            lo = np.zeros(lanes, dtype=np.int64)
            hi = np.full(lanes, width - 1)
            for _ in range((width - 1).bit_length()):
                mid = (lo + hi) >> 1
                right = cdf[base + mid] <= u
                lo = np.where(right, mid + 1, lo)
                hi = np.where(right, hi, mid)
            state = nxt[base + lo]
            starting = after_sep & ~sep
            if starting.any():
                state[starting] = np.searchsorted(self._start_cdf, u[starting], side="right")
            out[:, t] = np.where(sep, self.sep_token_id, state + _FIRST_WORD)
            ended = stop & ~sep
            after_sep = sep
        return out.ravel()[:num_tokens]
