"""The losses a model must beat to have learned anything beyond token frequencies or pairs.

An add-one (Laplace) unigram and bigram model of the training blocks, scored on validation blocks
in nats per predicted token, exactly where the model is scored:

* next-token prediction: every position after a block's first, predicted from the token before
  it (bigram) or from nothing (unigram), pairs never crossing a block boundary;
* masked-token prediction: the positions the validation masks pick, with the same masks (the
  data module's validation collator); the bigram reads the token to the left as the model sees it
  (after masking) and falls back to the unigram where that token is ``[MASK]`` or there is none.

Counts cover every training token (and every adjacent pair within a block); each probability is
``(count + 1) / (total + vocab_size)``, so no validation token scores zero.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tiedemb.data.sampling import SAMPLE_KEY
from tiedemb.nn.layers import IGNORE_INDEX


class NgramCounts:
    """Unigram and adjacent-pair counts of a (blocks, block_size) array of token ids."""

    def __init__(self, blocks: np.ndarray, vocab_size: int) -> None:
        blocks = np.asarray(blocks, dtype=np.int64)
        self.vocab_size = vocab_size
        self.unigram = np.bincount(blocks.ravel(), minlength=vocab_size).astype(np.float64)
        previous, following = blocks[:, :-1].ravel(), blocks[:, 1:].ravel()
        self.pair_keys, pair_counts = np.unique(previous * vocab_size + following, return_counts=True)
        self.pair_counts = pair_counts.astype(np.float64)
        self.context = np.bincount(previous, minlength=vocab_size).astype(np.float64)

    def unigram_log_prob(self, targets: np.ndarray) -> np.ndarray:
        return np.log((self.unigram[targets] + 1.0) / (self.unigram.sum() + self.vocab_size))

    def bigram_log_prob(self, previous: np.ndarray, targets: np.ndarray) -> np.ndarray:
        keys = previous * self.vocab_size + targets
        where = np.searchsorted(self.pair_keys, keys)
        where = np.minimum(where, len(self.pair_keys) - 1)
        counts = np.where(self.pair_keys[where] == keys, self.pair_counts[where], 0.0)
        return np.log((counts + 1.0) / (self.context[previous] + self.vocab_size))


def ngram_baselines(
    train: np.ndarray,
    val: np.ndarray,
    *,
    vocab_size: int,
    objective: str,
    collator: Callable | None = None,
    batch_size: int = 256,
) -> dict[str, float]:
    """``{"unigram": loss, "bigram": loss}`` on ``val`` of models counted on ``train`` (module docstring).

    ``collator``: for ``objective="mlm"``, the validation collator whose masks pick the targets
    (it is called on examples keyed ``(0, index)``, as the validation loader keys them).
    """
    counts = NgramCounts(train, vocab_size)
    val = np.asarray(val, dtype=np.int64)
    if objective == "clm":
        previous, targets = val[:, :-1].ravel(), val[:, 1:].ravel()
        return {
            "unigram": -float(counts.unigram_log_prob(targets).mean()),
            "bigram": -float(counts.bigram_log_prob(previous, targets).mean()),
        }
    if collator is None:
        raise ValueError("masked-token baselines need the validation collator, whose masks pick the targets")
    unigram, bigram = [], []
    for start in range(0, len(val), batch_size):
        rows = range(start, min(start + batch_size, len(val)))
        batch = collator([{"input_ids": val[i], SAMPLE_KEY: (0, i)} for i in rows])
        seen, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
        row, column = np.nonzero(labels != IGNORE_INDEX)
        targets = labels[row, column]
        unigram_lp = counts.unigram_log_prob(targets)
        previous = seen[row, np.maximum(column - 1, 0)]
        usable = (column > 0) & (previous != collator.mask_token_id)
        bigram_lp = np.where(usable, counts.bigram_log_prob(previous, targets), unigram_lp)
        unigram.append(unigram_lp)
        bigram.append(bigram_lp)
    unigram_all, bigram_all = np.concatenate(unigram), np.concatenate(bigram)
    return {"unigram": -float(unigram_all.mean()), "bigram": -float(bigram_all.mean())}
