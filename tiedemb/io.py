"""Writing files so that a crash never leaves a half-written one in place of a good one.

Every file tiedemb writes for later use (checkpoints, reports, tables) goes to a temporary
file beside its target, is flushed to disk, and only then renamed over the target. A rename
within one directory is atomic on POSIX file systems, so a reader (or a resumed run) sees
either the complete old file or the complete new one, whatever moment the writer died at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from tiedemb.errors import UserError

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
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)
        except PermissionError:
            pass  # alive, owned by someone else


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
    """Open ``path`` for writing so that it is replaced only once the block has completed.

    ``with atomic_write("report.json") as f: json.dump(result, f)``. If the block raises (or the
    process dies), ``path`` keeps its previous contents. ``mode`` is ``"w"`` or ``"wb"``.
    """
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
    """Fill a temporary sibling folder, then rename it to ``target``.

    ``with atomic_directory(folder, "stats.json") as staging: ...`` writes into ``staging``. An
    incomplete leftover at ``target`` (no ``complete_marker`` inside) is replaced; if another
    process (a second DDP rank, say) completed the same folder first, that one is kept.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
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


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    with atomic_write(path, "w") as handle:
        handle.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


class NonFiniteCheckpoint(UserError):
    """A checkpoint was about to be written with NaN or infinite weights."""


def non_finite_tensors(state_dict: dict[str, Any]) -> list[str]:
    """Names of floating-point tensors in ``state_dict`` holding NaN or infinity."""
    return [
        name
        for name, value in state_dict.items()
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all())
    ]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, made crash-safe and refusing to save diverged weights.

    Lightning's own writer stages the file in the system temporary folder and moves it, which
    is a copy (not atomic) whenever that folder is on another file system, and holds the whole
    checkpoint in memory twice. This one streams ``torch.save`` into a temporary file in the
    target's folder, fsyncs it and renames it over the target. Remote (fsspec) paths keep
    Lightning's behaviour. Loading is unchanged.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        broken = non_finite_tensors(checkpoint.get("state_dict", {}))
        if broken:
            # The previous checkpoint stays: it is the last one whose weights were finite.
            step = checkpoint.get("global_step", "?")
            raise NonFiniteCheckpoint(
                f"the weights became non-finite (NaN or infinite, e.g. {broken[0]}) by step {step}; the run stops "
                f"and {str(path)!r} keeps its last good contents. Lower model.learning_rate or raise model.warmup_steps."
            )
        save_atomically(checkpoint, path)


def save_atomically(obj: Any, path: str | os.PathLike, save: Callable[[Any, IO], None] | None = None) -> None:
    """``torch.save(obj, path)`` (or ``save(obj, file)``), but ``path`` only ever holds a complete file."""
    with atomic_write(path, "wb") as handle:
        (save or torch.save)(obj, handle)


def _is_local(path: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(get_filesystem(str(path)), LocalFileSystem)
