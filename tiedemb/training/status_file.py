"""``status.json``: how a run stands (running, finished, failed), written atomically by a sweep's cell
(``tiedemb.experiments.cells``) and by every run (``status_callback.RunStatus``), read by the report.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from pathlib import Path
from typing import Any

from tiedemb.training.files import atomic_write_text, process_ended

STATUS_FILE = "status.json"
RUNNING, FINISHED, FAILED = "running", "finished", "failed"
LOST = "lost"  # what a reader makes of "running" whose process has ended here: it never wrote its end


def write_json(path: str | Path, content: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(content, indent=2, default=str) + "\n")


def read_json(path: str | Path) -> dict[str, Any] | None:
    """The file's object, or ``None`` when it is absent or unreadable (a run killed before writing it)."""
    try:
        content = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def read_status(folder: str | Path) -> dict[str, Any] | None:
    return read_json(Path(folder) / STATUS_FILE)


def write_status(folder: str | Path, content: dict[str, Any]) -> None:
    write_json(Path(folder) / STATUS_FILE, content)


def now() -> str:
    """The time a status records: UTC, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def process_fields() -> dict[str, Any]:
    """Where the record's writer runs, so that a reader on the same host can tell whether it still does."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def lost_process(status: dict[str, Any]) -> bool:
    """Whether a ``running`` record's process, on this host, has ended without writing its end (SIGKILL)."""
    pid = status.get("pid")
    if (
        status.get("state") != RUNNING
        or status.get("host") != socket.gethostname()
        or not isinstance(pid, int)
        or pid <= 0
    ):
        return False
    return process_ended(pid)
