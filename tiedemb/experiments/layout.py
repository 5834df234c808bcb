"""What a sweep leaves in its output folder, shared by the sweep runner and the report.

::

    OUT/sweep.json                     the sweep: name, file, every cell's id, skipped studies
    OUT/<study>/<label=value,...>/     one cell
        cell.json                      its labels, configs, overrides and command lines (and a
                                       chained cell's upstream cell and checkpoint path)
        status.json                    running / finished / failed / waiting (for an upstream
                                       cell), attempts, times, exit codes
        config.yaml                    the resolved configuration, as the run saved it
        log.txt                        stdout and stderr of every attempt
        csv/version_*/metrics.csv      Lightning's CSVLogger (a resumed or test stage adds a version)
        wandb/offline-run-*/           W&B's records (synced later with `wandb sync`)
        tiedemb/<run id>/checkpoints/  Lightning's checkpoints (last.ckpt, the best ones)

Every JSON file is replaced atomically, so a crash never leaves half a status behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tiedemb.training.files import atomic_write_text

MANIFEST_FILE = "sweep.json"
CELL_FILE = "cell.json"
STATUS_FILE = "status.json"
LOG_FILE = "log.txt"

RUNNING, FINISHED, FAILED = "running", "finished", "failed"
WAITING = "waiting"  # a chained cell whose upstream cell has not finished: never started


def write_json(path: str | Path, content: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(content, indent=2, default=str) + "\n")


def read_json(path: str | Path) -> dict[str, Any] | None:
    """The file's object, or ``None`` when it is absent or unreadable (a run killed before writing it)."""
    try:
        content = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def read_status(cell_dir: str | Path) -> dict[str, Any] | None:
    return read_json(Path(cell_dir) / STATUS_FILE)


def is_finished(cell_dir: str | Path) -> bool:
    status = read_status(cell_dir)
    return bool(status) and status.get("state") == FINISHED


def cell_dirs(root: str | Path) -> list[Path]:
    """Every cell folder under ``root`` (one holding ``cell.json``), in path order."""
    return sorted(path.parent for path in Path(root).rglob(CELL_FILE))
