"""The losses a model must beat to have learned anything beyond token frequencies or pairs.

Add-one (Laplace) unigram and bigram models of the training blocks, scored in nats exactly where
the model is scored: for next-token prediction every position after a block's first (pairs never
cross a block boundary); for masked-token prediction the positions the validation masks pick, the
bigram reading the token to the left as the model sees it, the unigram where that is ``[MASK]``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tiedemb.data.sampling import SAMPLE_KEY
from tiedemb.nn.layers import IGNORE_INDEX


def ngram_baselines(
    train: np.ndarray,
    val: np.ndarray,
    *,
    vocab_size: int,
    objective: str,
    collator: Callable | None = None,
    batch_size: int = 256,
) -> dict[str, float]:
    """``{"unigram": loss, "bigram": loss}`` on ``val`` of models counted on ``train``; ``collator``:
    for mlm, the validation collator whose masks pick the targets."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    unigram_counts = np.bincount(train.ravel(), minlength=vocab_size).astype(np.float64)
    before, after = train[:, :-1].ravel(), train[:, 1:].ravel()
    pair_keys, pair_counts = np.unique(before * vocab_size + after, return_counts=True)
    context = np.bincount(before, minlength=vocab_size).astype(np.float64)

    def unigram(targets: np.ndarray) -> np.ndarray:
        return np.log((unigram_counts[targets] + 1.0) / (unigram_counts.sum() + vocab_size))

    def bigram(previous: np.ndarray, targets: np.ndarray) -> np.ndarray:
        keys = previous * vocab_size + targets
        where = np.minimum(np.searchsorted(pair_keys, keys), len(pair_keys) - 1)
        counts = np.where(pair_keys[where] == keys, pair_counts[where], 0.0)
        return np.log((counts + 1.0) / (context[previous] + vocab_size))

    if objective == "clm":
        previous, targets = val[:, :-1].ravel(), val[:, 1:].ravel()
        return {"unigram": -float(unigram(targets).mean()), "bigram": -float(bigram(previous, targets).mean())}
    unigram_lps, bigram_lps = [], []
    for start in range(0, len(val), batch_size):
        rows = range(start, min(start + batch_size, len(val)))
        batch = collator([{"input_ids": val[i], SAMPLE_KEY: (0, i)} for i in rows])
        seen, labels = batch["input_ids"].numpy(), batch["labels"].numpy()
        row, column = np.nonzero(labels != IGNORE_INDEX)
        targets = labels[row, column]
        previous = seen[row, np.maximum(column - 1, 0)]
        usable = (column > 0) & (previous != collator.mask_token_id)
        unigram_lps.append(unigram(targets))
        bigram_lps.append(np.where(usable, bigram(previous, targets), unigram_lps[-1]))
    return {"unigram": -float(np.concatenate(unigram_lps).mean()), "bigram": -float(np.concatenate(bigram_lps).mean())}
