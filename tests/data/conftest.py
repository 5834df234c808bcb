"""Fixtures of the data tests."""

from __future__ import annotations

import pytest
from text_helpers import sentences

from tiedemb.data.tokenizers import train_tokenizer


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory) -> str:
    """A WordPiece tokenizer trained on the generated vocabulary, so most tests need no shared data."""
    folder = tmp_path_factory.mktemp("tok") / "wordpiece"
    train_tokenizer(sentences(300) + [f"doc{i}" for i in range(300)], kind="wordpiece", vocab_size=400, save_dir=folder)
    return str(folder)
