"""Fixtures shared by the sweep tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiedemb.experiments import cells as sweep_module


@pytest.fixture
def fake_runs(monkeypatch):
    """Cells 'run' by writing a metrics file; failing ids exit 1. Records every command."""
    calls: list[list[str]] = []
    failing: set[str] = set()

    def run_logged(command, log_file, workdir, heading, threads=None):
        calls.append(command)
        folder = Path(log_file).parent
        metrics = folder / "csv" / "version_0"
        metrics.mkdir(parents=True, exist_ok=True)
        (metrics / "metrics.csv").write_text("step,val/loss\n0,1.0\n")
        log_file.write_text("error: boom\n" if folder.name in failing else "ok\n")
        return 1 if folder.name in failing else 0

    monkeypatch.setattr(sweep_module, "_run_logged", run_logged)
    monkeypatch.setattr(sweep_module, "validate_cell", lambda *args: "")
    return calls, failing
