"""What a sweep leaves in its output folder, shared by the sweep runner and the report.

``OUT/sweep.json`` names the sweep and its cells. A cell's folder ``OUT/<study>/<label=value,...>/`` is
its run's folder (``--run_name=.``): ``cell.json`` (its labels, spec, and a chained cell's upstream
checkpoint), ``status.json`` (running / finished / failed / waiting, attempts, times, exit codes),
``log.txt`` (each attempt's command line and output), ``config.yaml``, ``csv/version_*/``,
``wandb/`` and ``checkpoints/``. JSON files are replaced atomically.
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
