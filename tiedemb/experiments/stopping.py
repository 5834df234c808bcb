"""A sweep told to stop by its scheduler (SIGTERM, as SLURM sends before it ends a job).

The running stage gets SIGTERM in turn, saves its state after its step
(``tiedemb.training.checkpoints.SaveOnPreemption``) and exits 143; the sweep records the cell as
preempted and stops. A rerun resumes the cell.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
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
        """Catch SIGTERM in the block (the sweep runs in the main thread), forgotten after it."""
        self.received.clear()
        previous = signal.signal(signal.SIGTERM, self._handle)
        try:
            yield self
        finally:
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


STOP_SIGNALS_RECEIVED = StopSignals()  # installed by run_sweep, given each stage's process by _run_logged
