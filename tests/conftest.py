"""Fixtures shared across the test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from tiny_vocab import TINY_VOCAB

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
"""pytest-xdist's worker processes (1 without it): they share the cores, so each takes its share
of threads, for its own tensors and for the processes its tests start, instead of contending."""
if WORKERS > 1:
    _threads = max(1, (os.cpu_count() or 1) // WORKERS)
    torch.set_num_threads(_threads)
    os.environ["OMP_NUM_THREADS"] = str(_threads)

SHARED_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
"""Real public data kept beside the repository (``../shared/data``), never copied into it."""



def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longer and the GPU checks are end-to-end runs too, so ``-m "not end_to_end"`` is the unit tests alone."""
    for item in items:
        if item.get_closest_marker("slow") or item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.end_to_end)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data folder; a test that needs it is skipped where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (expected beside the repository as ../shared/data)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def bert_tokenizer_dir(shared_data: Path) -> Path:
    """The real BERT uncased tokenizer directory from the shared data."""
    path = shared_data / "tokenizers" / "bert-base-uncased"
    if not path.is_dir():
        pytest.skip(f"tokenizer folder {path} is absent from the shared data")
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved BERT-style WordPiece tokenizer with a few dozen words, for tests without real data."""
    from transformers import BertTokenizer

    tokenizer = BertTokenizer(vocab={word: number for number, word in enumerate(TINY_VOCAB)})
    path = tmp_path_factory.mktemp("tiny_tokenizer")
    tokenizer.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module's runs (``pytestmark = pytest.mark.usefixtures("one_thread")``).

    On a busy 2-core machine two threads per process contend and a run is several times slower;
    with one thread every run also reduces in the same order, so exact-resume comparisons hold.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
