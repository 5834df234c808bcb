"""Lightning's checkpoint writer, made crash-safe and refusing to save diverged weights; the best
checkpoint also under the stable name ``best.ckpt``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import IO, Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from tiedemb.errors import UserError
from tiedemb.training.files import atomic_write

BEST_NAME = "best.ckpt"
"""The best checkpoint of a run by its checkpoint callback's monitored metric, whatever that metric is."""


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

    Every checkpoint it writes records its checkpoint callbacks' best file (``best_model_path``,
    set before the file is written); once that file exists, ``best.ckpt`` beside it is the same
    file (``keep_best_name``), so a run's best checkpoint has a name that does not depend on the
    monitored metric or the step.
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
                f"and {str(path)!r} keeps its last good contents. "
                "Lower model.learning_rate or raise model.warmup_steps."
            )
        save_atomically(checkpoint, path)
        keep_best_name(checkpoint, path)


def keep_best_name(checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
    """Make ``best.ckpt`` in ``path``'s folder the best checkpoint the callbacks' state names there.

    Until a validation has scored a checkpoint (a run shorter than its first validation), the
    best there is is the newest state: ``best.ckpt`` is then the file just written. A hard link
    (no second copy on disk; it outlives the descriptive name when top-k rotation deletes that),
    else a copy where the file system has no links; replaced atomically.
    """
    written = os.path.realpath(path)
    folder = os.path.dirname(written)
    for state in (checkpoint.get("callbacks") or {}).values():
        if not isinstance(state, dict) or "best_model_path" not in state:
            continue
        best = state.get("best_model_path") or ""
        if best and os.path.dirname(os.path.realpath(best)) == folder and os.path.isfile(best):
            _link(best, os.path.join(folder, BEST_NAME))
            return
        if not best and state.get("dirpath") and os.path.realpath(str(state["dirpath"])) == folder:
            _link(written, os.path.join(folder, BEST_NAME))
            return


def _link(source: str, target: str) -> None:
    if os.path.realpath(source) == target or (os.path.exists(target) and os.path.samefile(source, target)):
        return
    staged = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.link")
    try:
        os.link(source, staged)
    except OSError:  # a file system without hard links (or a leftover staged file: copied over)
        shutil.copyfile(source, staged)
    os.replace(staged, target)


def save_atomically(obj: Any, path: str | os.PathLike, save: Callable[[Any, IO], None] | None = None) -> None:
    """``torch.save(obj, path)`` (or ``save(obj, file)``), but ``path`` only ever holds a complete file."""
    with atomic_write(path, "wb") as handle:
        (save or torch.save)(obj, handle)


def _is_local(path: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(get_filesystem(str(path)), LocalFileSystem)
