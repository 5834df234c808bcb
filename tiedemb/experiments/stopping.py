"""A sweep told to stop by its scheduler: SIGTERM, what SLURM and most clusters send before they end a job.

While the sweep runs, ``StopSignals`` catches SIGTERM sent to the sweep process (``kill PID``, a
cancelled or preempted job): the running stage gets SIGTERM in turn, saves its state after the step it
is in (``tiedemb.training.preemption``) and exits 143; the sweep records the cell as preempted and
stops. Running the sweep again resumes the cell from that checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType


class SweepStopped(Exception):
    """The sweep process got SIGTERM; the cell it ran is recorded, the sweep ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


class StopSignals:
    """The SIGTERMs the sweep process got, passed on to the stage that runs."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child: subprocess.Popen | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    @contextlib.contextmanager
    def watching(self) -> Iterator[StopSignals]:
        """Catch SIGTERM for the duration of the block (signal handlers live in the main thread); what was
        received is forgotten after it, so no later stage is stopped for it."""
        self.received.clear()
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, self._handle) if main else None
        try:
            yield self
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
            self.received.clear()

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
