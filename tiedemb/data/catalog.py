"""The data the shipped configs read, by name: where each lies under ``data/`` and where it comes from.

``tiedemb data prepare NAME ...`` makes these files; a loader that does not find one says that
command (``prepare_hint``). Free of heavy imports: error paths and the sweep reader ask it for hints.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePath

DATA_DIR = Path("data")  # relative to the working folder, as the shipped configs read it
CHECKSUMS = "SHA256SUMS"  # sha256sum's format, one prepared file a line


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (``CHECKSUMS`` lists them; cache keys hold them)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Entry:
    """One named data set: what it holds, its place in the data folder, where it comes from."""

    name: str
    what: str
    location: str
    source: str


ENTRIES: dict[str, Entry] = {
    entry.name: entry
    for entry in (
        Entry(
            "brown",
            "the Brown corpus: 500 documents, one a line, word-tokenised, part-of-speech tags removed",
            "text/brown.txt",
            "NLTK's downloader (needs nltk: pip install 'tiedemb[data]')",
        ),
        Entry(
            "wikitext-2",
            "WikiText-2's validation text (wikitext-2-v1: word-tokenised, rare words as <unk>)",
            "text/wikitext-2-valid.txt",
            "the hub: Salesforce/wikitext, wikitext-2-v1, validation split",
        ),
        Entry(
            "mrpc",
            "GLUE MRPC (train, dev, test) in the glue_data layout",
            "glue/MRPC",
            "the hub: nyu-mll/glue, mrpc",
        ),
        Entry(
            "mnli",
            "GLUE MNLI (train, matched and mismatched dev and test) in the glue_data layout",
            "glue/MNLI",
            "the hub: nyu-mll/glue, mnli",
        ),
        Entry(
            "bert-base-uncased",
            "the BERT uncased WordPiece tokenizer (30522 tokens)",
            "tokenizers/bert-base-uncased",
            "the hub: bert-base-uncased (its tokenizer, not the model)",
        ),
    )
}


def entry_for(path: str | os.PathLike) -> Entry | None:
    """The entry whose file or folder ``path`` is, or lies in, under a folder named ``data``."""
    parts = PurePath(os.path.expanduser(str(path))).parts
    for entry in ENTRIES.values():
        wanted = (DATA_DIR.name, *PurePath(entry.location).parts)
        if any(parts[start : start + len(wanted)] == wanted for start in range(len(parts) - len(wanted) + 1)):
            return entry
    return None


def prepare_hint(path: str | os.PathLike) -> str:
    """`` (`tiedemb data prepare NAME` makes it)`` for a missing path a named data set provides, else ``""``."""
    entry = entry_for(path)
    return f" (`tiedemb data prepare {entry.name}` makes it)" if entry is not None else ""
