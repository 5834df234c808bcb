"""Files written so that a crash never leaves a half-written one (``atomic_write``), and never over an
earlier one (``write_new_file``, ``first_free``: ``name``, ``name-1``, ``name-2`` ...).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from tiedemb.errors import UserError

MAX_NUMBERED_NAMES = 10_000
PARTIAL_SUFFIX = ".partial"
"""Ends the name of a file still being written (``.last.ckpt.<host>.<pid>.partial``)."""


def _partial_path(target: Path) -> Path:
    # A hidden name with another suffix: tools that look for `*.ckpt` or `last*.ckpt` skip it.
    return target.with_name(f".{target.name}.{socket.gethostname()}.{os.getpid()}{PARTIAL_SUFFIX}")


def _remove_stale_partials(target: Path) -> None:
    """Delete partial files of ``target`` left by dead processes of this host (killed mid-write)."""
    host = socket.gethostname()
    for leftover in target.parent.glob(f".{target.name}.{host}.*{PARTIAL_SUFFIX}"):
        pid_text = leftover.name[len(f".{target.name}.{host}.") : -len(PARTIAL_SUFFIX)]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        if process_ended(int(pid_text)):
            leftover.unlink(missing_ok=True)


def process_ended(pid: int) -> bool:
    """Whether no process ``pid`` runs on this host any more (one owned by someone else still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        return False
    return False


def _fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs: Any) -> Iterator[IO]:
    """Open ``path`` for writing (``mode`` ``"w"`` or ``"wb"``) so that it is replaced only once the block
    has completed: a temporary file beside it, fsynced, renamed over it."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes whole files; mode must be 'w' or 'wb', not {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(target)
    partial = _partial_path(target)
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    try:
        with open(partial, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, complete_marker: str) -> Iterator[Path]:
    """Fill a temporary sibling folder, then rename it to ``target``; a leftover without
    ``complete_marker`` is replaced, one another process completed first is kept."""
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
    """The process's file mode creation mask, read where Linux shows it rather than set and reset."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_permissions(folder: str | os.PathLike) -> None:
    """Give ``folder``, and every folder and file in it, the mode ``mkdir`` and ``open`` give under the
    umask (``mkstemp``'s files, as transformers writes them, are private whatever the umask)."""
    mask = umask()
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` or an exception it was raised from is a full disk (libraries wrap OSError)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        # what Python would print as the cause: an explicit one, else the context unless suppressed
        error = (
            error.__cause__
            if error.__cause__ is not None
            else None
            if error.__suppress_context__
            else error.__context__
        )
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
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    with atomic_write(path, "w") as handle:
        handle.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


# --------------------------------------------------------------------------- never over an earlier file


def numbered_names(name: str) -> Iterator[str]:
    """``name``, then ``stem-1.suffix``, ``stem-2.suffix`` ...: the names a new file (or folder) tries in turn."""
    stem, suffix = os.path.splitext(name)
    yield name
    number = 1
    while True:
        yield f"{stem}-{number}{suffix}"
        number += 1


def first_free(folder: str | os.PathLike, name: str, taken: Callable[[Path], bool] = os.path.exists) -> Path:
    """The first of ``numbered_names(name)`` in ``folder`` that is not ``taken`` (by default: exists)."""
    return next(Path(folder) / candidate for candidate in numbered_names(name) if not taken(Path(folder) / candidate))


def write_new_file(directory: str | os.PathLike, filename: str, text: str) -> Path:
    """Write ``text`` to ``filename`` in ``directory``, or to the next free name; the path it got.
    Hard-linked from a temporary file: a reader sees no file or a whole one, never over an earlier one."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{filename}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        for _, candidate in zip(range(MAX_NUMBERED_NAMES), numbered_names(filename)):
            target = directory / candidate
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


def write_tsv(
    directory: str | os.PathLike, filename: str, header: Sequence[str], rows: Iterable[Sequence[object]]
) -> Path:
    """Write a tab-separated file with ``write_new_file``; return the path it got."""
    text = "\t".join(header) + "\n" + "".join("\t".join(str(cell) for cell in row) + "\n" for row in rows)
    return write_new_file(directory, filename, text)
