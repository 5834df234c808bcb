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
        csv/version_*/status.json      that process's own record (every run writes one: status_callback.py)
        wandb/offline-run-*/           W&B's records (synced later with `wandb sync`)
        checkpoints/                   last.ckpt, best.ckpt and the best ones by name

A cell's folder is its run's folder (``--run_name=.``, ``tiedemb.training.run_dir``).

Every JSON file is replaced atomically, so a crash never leaves half a status behind.
"""

from __future__ import annotations

from pathlib import Path

from tiedemb.training.status_file import (  # noqa: F401 (the status record's names, for the sweep and the report)
    FAILED,
    FINISHED,
    RUNNING,
    STATUS_FILE,
    read_json,
    read_status,
    write_json,
)

MANIFEST_FILE = "sweep.json"
CELL_FILE = "cell.json"
LOG_FILE = "log.txt"

WAITING = "waiting"  # a chained cell whose upstream cell has not finished: never started


def is_finished(cell_dir: str | Path) -> bool:
    status = read_status(cell_dir)
    return bool(status) and status.get("state") == FINISHED


def cell_dirs(root: str | Path) -> list[Path]:
    """Every cell folder under ``root`` (one holding ``cell.json``), in path order."""
    return sorted(path.parent for path in Path(root).rglob(CELL_FILE))
