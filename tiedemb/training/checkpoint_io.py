"""Lightning's checkpoint writer, made crash-safe and refusing to save diverged weights."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from tiedemb.errors import UserError
from tiedemb.training.files import atomic_write


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
                f"and {str(path)!r} keeps its last good contents. "
                "Lower model.learning_rate or raise model.warmup_steps."
            )
        save_atomically(checkpoint, path)


def save_atomically(obj: Any, path: str | os.PathLike, save: Callable[[Any, IO], None] | None = None) -> None:
    """``torch.save(obj, path)`` (or ``save(obj, file)``), but ``path`` only ever holds a complete file."""
    with atomic_write(path, "wb") as handle:
        (save or torch.save)(obj, handle)


def _is_local(path: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(get_filesystem(str(path)), LocalFileSystem)
