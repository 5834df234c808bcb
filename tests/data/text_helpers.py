"""Generated documents and a one-call ``prepare_text`` shared by the text-preparation tests."""

from __future__ import annotations

import numpy as np

from tiedemb.data import text
from tiedemb.data.text import prepare_text

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def sentences(count: int, seed: int = 0) -> list[str]:
    """Distinct, deterministic documents of 3 to 12 words."""
    rng = np.random.default_rng(seed)
    return [f"doc{i} " + " ".join(rng.choice(WORDS, size=rng.integers(3, 13))) for i in range(count)]


def prepare(**overrides) -> text.PreparedText:
    arguments = dict(
        objective="mlm",
        tokenizer=None,
        vocab_size=None,
        dataset=None,
        dataset_config=None,
        train_files=None,
        val_files=None,
        block_size=16,
        val_fraction=0.1,
    )
    return prepare_text(**(arguments | overrides))
