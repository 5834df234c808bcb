"""Files written so that a crash never leaves a half-written one (``atomic_write``), and never over an
earlier one (``write_new_file``, ``first_free``: ``name``, ``name-1``, ``name-2`` ...).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from tiedemb.errors import UserError

PARTIAL_SUFFIX = ".partial"
"""Ends the name of a file still being written (``.last.ckpt.<host>.<pid>.partial``)."""


def process_ended(pid: int) -> bool:
    """Whether no process ``pid`` runs on this host any more (one owned by someone else still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        pass
    return False


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open ``path`` (``"w"``: UTF-8, or ``"wb"``) to be replaced once the block completes: a hidden partial file
    beside it (``*.ckpt`` globs skip it), fsynced, renamed over it; dead writers' partial files are removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{target.name}.{socket.gethostname()}."
    for leftover in target.parent.glob(f"{prefix}*{PARTIAL_SUFFIX}"):
        pid = leftover.name[len(prefix) : -len(PARTIAL_SUFFIX)]
        if pid.isdigit() and int(pid) != os.getpid() and process_ended(int(pid)):
            leftover.unlink(missing_ok=True)
    partial = target.with_name(f"{prefix}{os.getpid()}{PARTIAL_SUFFIX}")
    try:
        with open(partial, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, complete_marker: str) -> Iterator[Path]:
    """Fill a temporary sibling folder, renamed to ``target`` (one another process completed first is kept)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    os.chmod(staging, 0o777 & ~umask())  # mkdtemp's 0700 would follow the rename; target is an ordinary folder
    try:
        yield staging
        shutil.rmtree(target, ignore_errors=True)  # complete folders are reused by callers, never rewritten
        try:
            staging.rename(target)
        except OSError:
            if not (target / complete_marker).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_permissions(folder: str | os.PathLike) -> None:
    """Give everything in ``folder`` the mode the umask gives (transformers writes private ``mkstemp`` files)."""
    mask = umask()
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)


def out_of_space(error: BaseException | None) -> bool:
    """Whether ``error`` or an exception it was raised from is a full disk (libraries wrap OSError)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen.add(id(error))
        # what Python prints as the cause: an explicit one, else the context unless raised ``from None``
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return False


@contextlib.contextmanager
def disk_full_is_reported(folder: str | os.PathLike, what: str, remedy: str) -> Iterator[None]:
    """Turn a full disk while the block writes ``what`` under ``folder`` into one ``UserError``."""
    try:
        yield
    except Exception as error:
        if not out_of_space(error):
            raise
        raise UserError(
            f"no space left on the device holding {str(folder)!r} while writing {what}; the partial "
            f"copy was removed and earlier files there are intact. Free some space, or {remedy}"
        ) from None


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as handle:
        handle.write(data)


# --------------------------------------------------------------------------- never over an earlier file


def numbered_names(name: str) -> Iterator[str]:
    """``name``, then ``stem-1.suffix``, ``stem-2.suffix`` ...: the names a new file (or folder) tries in turn."""
    stem, suffix = os.path.splitext(name)
    yield name
    for number in itertools.count(1):
        yield f"{stem}-{number}{suffix}"


def first_free(folder: str | os.PathLike, name: str) -> Path:
    """The first of ``numbered_names(name)`` in ``folder`` that does not exist."""
    return next(
        Path(folder) / candidate for candidate in numbered_names(name) if not (Path(folder) / candidate).exists()
    )


def write_new_file(directory: str | os.PathLike, filename: str, text: str) -> Path:
    """Write ``text`` to ``filename`` in ``directory``, or to the next free name (hard-linked from a temporary
    file: a reader sees no file or a whole one, never over an earlier one); the path it got."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", newline="", dir=directory, prefix=f".{filename}."
    ) as handle:
        handle.write(text)
        handle.flush()
        for candidate in numbered_names(filename):
            try:
                os.link(handle.name, directory / candidate)
            except FileExistsError:
                continue
            return directory / candidate


def write_tsv(
    directory: str | os.PathLike, filename: str, header: Sequence[str], rows: Iterable[Sequence[object]]
) -> Path:
    text = "\t".join(header) + "\n" + "".join("\t".join(str(cell) for cell in row) + "\n" for row in rows)
    return write_new_file(directory, filename, text)
