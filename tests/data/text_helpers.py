"""Generated documents and a one-call text preparation shared by the text-preparation tests."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tiedemb.data.text import plan_text

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def sentences(count: int, seed: int = 0) -> list[str]:
    """Distinct, deterministic documents of 3 to 12 words."""
    rng = np.random.default_rng(seed)
    return [f"doc{i} " + " ".join(rng.choice(WORDS, size=rng.integers(3, 13))) for i in range(count)]


def prepare(objective: str = "mlm", seed: int = 0, **overrides) -> SimpleNamespace:
    """``plan_text``'s text, tokenised and blocked (from the cache when it is there): its ``train`` and
    ``val`` blocks, ``tokenizer`` and ``stats``. ``seed`` splits off the held-out documents."""
    settings = dict(
        tokenizer=None,
        vocab_size=None,
        dataset=None,
        dataset_config=None,
        train_files=None,
        val_files=None,
        text_column="text",
        block_size=16,
        val_fraction=0.1,
        num_proc=None,
        cache_dir="data/cache",
        corpus_seed=seed,
    )
    cache = plan_text(settings | overrides, objective)
    cache.write()
    splits = cache.open()
    return SimpleNamespace(train=splits["train"], val=splits["val"], tokenizer=cache.tokenizer, stats=cache.stats())
