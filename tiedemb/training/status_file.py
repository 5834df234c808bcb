"""``status.json``: how a run stands (running, finished, failed), written atomically by every run
(``RunStatus``) and by a sweep's cell, read by the report. The run's id travels in its checkpoints (a
resumed run counts as one run). A record that cannot be written costs a warning, never the run.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tiedemb.training.files import atomic_write_text, process_ended

log = logging.getLogger("tiedemb")

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
    if status.get("state") != RUNNING or status.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    return pid > 0 and process_ended(pid)


class RunStatus(Callback):
    """Writes ``status.json`` into each CSV logger's version folder and into ``run_dir`` where one is given."""

    def __init__(self, run_dir: str | None = None) -> None:
        self._record: dict[str, Any] = {}
        self._run: str | None = None
        self.run_dir = run_dir

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._start(stage)
        self._write(trainer)

    def _start(self, stage: str) -> None:
        self._run = self._run or uuid.uuid4().hex[:16]  # replaced by a checkpoint's when one is loaded
        self._record = {"state": RUNNING, "stage": stage, "run": self._run, "started": now(), **process_fields()}

    def state_dict(self) -> dict[str, Any]:
        return {"run": self._run}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Lightning restores callbacks after setup; checkpoints from before runs had an id keep the new one.
        run = ((checkpoint.get("callbacks") or {}).get(self.state_key) or {}).get("run")
        if run and run != self._run:
            self._run = self._record["run"] = run
            self._write(trainer)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._record.get("state") == RUNNING:
            self._end(trainer, FINISHED, "")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not self._record:  # failed before the callbacks' setup (the data module's runs first)
            function = trainer.state.fn  # fit, validate, test, predict
            self._start(str(getattr(function, "value", function) or "fit"))
        if isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            signal = "SIGTERM" if isinstance(exception, SIGTERMException) else "Ctrl-C"
            message = f"stopped by {signal} after step {trainer.global_step}"
        else:
            lines = str(exception).strip().splitlines()
            message = f"{type(exception).__name__}: {lines[-1]}" if lines else type(exception).__name__
        self._end(trainer, FAILED, message)

    def _end(self, trainer: L.Trainer, state: str, message: str) -> None:
        self._record.update(state=state, finished=now(), step=trainer.global_step)
        if message:
            self._record["message"] = message
        self._write(trainer)

    def _write(self, trainer: L.Trainer) -> None:
        if not trainer.is_global_zero or not self._record:
            return
        folders = [logger.log_dir for logger in trainer.loggers if isinstance(logger, CSVLogger)]
        for folder in [*folders, *([self.run_dir] if self.run_dir else [])]:
            try:
                write_status(folder, self._record)
            except OSError as error:
                log.warning("could not write the run's %s in %s (%s)", STATUS_FILE, folder, error)
