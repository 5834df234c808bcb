"""Fixtures shared across the test suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from stand_in_data import write_stand_in_data
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
    """The longer, the GPU and the network checks are end-to-end runs too, so ``-m "not end_to_end"`` is
    the unit tests alone."""
    for item in items:
        if any(item.get_closest_marker(name) for name in ("slow", "gpu", "network")):
            item.add_marker(pytest.mark.end_to_end)
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_data)  # ``-m real_data``: the checks of the real files alone


@pytest.fixture(scope="session", autouse=True)
def _no_command_line_beside_the_arguments_tests_pass():
    """Tests drive the LightningCLI from within Python with a list of arguments, what its ``args`` is
    for; pytest's own command line in ``sys.argv`` would look like a second one (Lightning warns of
    "args parameter is intended to run from within Python"), so the test process has none."""
    given = sys.argv[:]
    sys.argv[1:] = []
    yield
    sys.argv[:] = given


WANDB_ENVIRONMENT = {name: value for name, value in os.environ.items() if name.startswith("WANDB_")}
"""``WANDB_*`` variables as the test session found them."""


@pytest.fixture(autouse=True)
def _wandb_environment_as_the_session_found_it():
    """Ends W&B's in-process session and puts ``WANDB_*`` back as the session found them after every test.

    A run in the test process (a test's or a module fixture's) sets some in ``os.environ``: W&B
    records its service there, tiedemb its offline decision. Commands that later tests start
    inherit the environment; with those variables they would join that service or keep that mode
    instead of starting as a user's command does; a later ``wandb.init`` in this process would keep
    the session's first settings (a test's ``WANDB_MODE=disabled``, say). Under pytest-xdist a
    worker runs many test files in one process, in an order that changes from run to run, so
    nothing may carry over.
    """
    yield
    if "wandb" in sys.modules:  # and W&B's in-process session, which would keep its first settings
        sys.modules["wandb"].teardown()
    for name in [name for name in os.environ if name.startswith("WANDB_")]:
        del os.environ[name]
    os.environ.update(WANDB_ENVIRONMENT)


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
def stand_in_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Made-up data in ``../shared/data``'s layout (``tests/stand_in_data.py``), built once a session:
    the tests that need a GLUE folder, a text or a WordPiece tokenizer run on it in any clone."""
    return write_stand_in_data(tmp_path_factory.mktemp("stand_in_data"))


@pytest.fixture(scope="session")
def glue_dir(stand_in_data: Path) -> Path:
    """A made-up ``glue_data`` folder: ``MRPC/{train,dev,test}.tsv`` and ``MNLI/{train,dev_matched}.tsv``."""
    return stand_in_data / "glue"


@pytest.fixture(scope="session")
def wordpiece_dir(stand_in_data: Path) -> Path:
    """A saved lower-casing WordPiece tokenizer of 400 pieces with BERT's special tokens."""
    return stand_in_data / "tokenizers" / "bert-base-uncased"


@pytest.fixture(scope="session")
def made_up_text(stand_in_data: Path) -> Path:
    """A made-up text in WikiText-2's shape (byte-order mark, headings, blank lines, ``<unk>``)."""
    return stand_in_data / "text" / "wikitext-2-valid.txt"


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
