"""Prediction files written atomically and never over an existing file.

A reader (or the GLUE submission zip) sees either no file or a whole one: rows go to a temporary
file in the target folder, which is then hard-linked to its final name. ``os.link`` fails when the
name exists, so an earlier file is never replaced, even by a concurrent run; the next free name
(``MRPC-1.tsv``, ``MRPC-2.tsv``, ...) is taken instead.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path


def write_tsv(directory: str | os.PathLike, filename: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    """Write a tab-separated file; return the path it got (``filename`` or the next free variant)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    text = "\t".join(header) + "\n" + "".join("\t".join(str(cell) for cell in row) + "\n" for row in rows)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{filename}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        stem, suffix = os.path.splitext(filename)
        for attempt in range(10_000):
            target = directory / (filename if attempt == 0 else f"{stem}-{attempt}{suffix}")
            try:
                os.link(temporary, target)
            except FileExistsError:
                continue
            except OSError:  # a file system without hard links: check, then rename
                if target.exists():
                    continue
                os.replace(temporary, target)
            return target
        raise FileExistsError(f"no free name for {filename} in {directory}")
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
