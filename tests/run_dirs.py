"""Finding what a run wrote: every run writes into its own folder under trainer.default_root_dir
(``<root>/<config name>-<id>/``, tiedemb.training.run_dir)."""

from __future__ import annotations

from pathlib import Path


def run_dir(root: str | Path) -> Path:
    """The one run folder under ``root`` (a folder with ``checkpoints/`` or ``csv/``)."""
    (folder,) = {
        path.parent for pattern in ("*/checkpoints", "*/csv", "*/config.yaml") for path in Path(root).glob(pattern)
    }
    return folder


def run_checkpoint(root: str | Path, name: str = "last.ckpt") -> Path:
    """``checkpoints/<name>`` of the one run under ``root``."""
    (path,) = Path(root).glob(f"*/checkpoints/{name}")
    return path
