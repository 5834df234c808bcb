"""A sweep told to stop by its scheduler: SIGTERM, and SLURM's warning before a job's time limit.

A cell's stage runs as a child process (``cells.run_cell``). While the sweep runs, ``StopSignals``
catches the two signals a scheduler sends the sweep process:

* ``SIGTERM``: a job being cancelled or preempted. The running stage gets SIGTERM in turn, saves
  its state after the step it is in (``tiedemb.training.preemption``) and exits 143; the sweep
  records the cell as preempted and stops.
* ``SIGUSR1``: what the job array of ``--emit slurm`` asks SLURM to send the batch shell (the sweep
  process, ``exec``-ed) shortly before the time limit (``#SBATCH --signal=B:USR1@...``). The stage is
  stopped the same way, and the sweep then requeues its own array task (``scontrol requeue``); the
  requeued job runs the same cell again, which resumes from the checkpoint saved at the signal.

The sweep does this itself rather than through Lightning's ``SLURMEnvironment(auto_requeue=True)``:
the batch shell alone gets the signal, and a stage started without ``srun`` is not a SLURM task to
Lightning; and Lightning's handler saves its ``hpc_ckpt_N.ckpt`` the moment the signal arrives, which
may be in the middle of a step, where a stop by SIGTERM saves after a complete one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType

REQUEUE_SIGNAL = signal.SIGUSR1
"""SLURM's warning before the time limit, as the emitted job array asks for it (``--signal=B:USR1@...``)."""
STOP_SIGNALS = (signal.SIGTERM, REQUEUE_SIGNAL)


class SweepStopped(Exception):
    """The sweep process got SIGTERM or SIGUSR1; the cell it ran is recorded, the sweep ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """The stop signals the sweep process got, passed on to the stage that runs as SIGTERM."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child: subprocess.Popen | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    @property
    def requeue(self) -> bool:
        """Whether SLURM warned of the time limit: the task is to be requeued, not just stopped."""
        return REQUEUE_SIGNAL in self.received

    @contextlib.contextmanager
    def watching(self) -> Iterator[StopSignals]:
        """Catch the stop signals for the duration of the block (signal handlers live in the main thread)."""
        self.received.clear()
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @contextlib.contextmanager
    def running(self, child: subprocess.Popen) -> Iterator[None]:
        """While ``child`` runs, a stop signal reaches it as SIGTERM (also one that came just before it started)."""
        self.child = child
        try:
            if self.received and child.poll() is None:
                child.send_signal(signal.SIGTERM)
            yield
        finally:
            self.child = None


STOP_SIGNALS_RECEIVED = StopSignals()
"""The sweep process's one watcher: ``run_sweep`` installs it, ``_run_logged`` hands it each stage's process."""


def slurm_task() -> str | None:
    """This SLURM job's id as ``scontrol requeue`` takes it (``<array job>_<task>`` for an array task)."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID") or None


def slurm_record() -> dict[str, object]:
    """What status.json notes about the SLURM job running the cell (nothing outside SLURM)."""
    task = slurm_task()
    if task is None:
        return {}
    record: dict[str, object] = {"job": task}
    restarts = os.environ.get("SLURM_RESTART_COUNT")
    if restarts is not None and restarts.isdigit():
        record["restart_count"] = int(restarts)  # how often SLURM requeued this job before this run
    return {"slurm": record}


def requeue_slurm_task() -> tuple[str | None, str]:
    """``scontrol requeue`` this job; return its id where that worked, and what happened, in words."""
    task = slurm_task()
    if task is None:
        return None, "not a SLURM job (no SLURM_JOB_ID)"
    try:
        finished = subprocess.run(["scontrol", "requeue", task], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"scontrol requeue {task} failed: {error}"
    if finished.returncode != 0:
        detail = (finished.stderr or finished.stdout).strip().splitlines()
        return None, f"scontrol requeue {task} failed with status {finished.returncode}" + (
            f": {detail[-1]}" if detail else ""
        )
    return task, f"SLURM job {task} requeued"
