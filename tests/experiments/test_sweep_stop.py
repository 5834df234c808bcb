"""A sweep told to stop: SIGTERM to the sweep process stops the running stage after its step, the cell is
recorded as preempted and the sweep ends; Ctrl-C from a terminal stops the stage at once, the cell is
recorded as interrupted and the sweep exits 130."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest
import torch
from sweep_files import CONFIGS, tiny_sweep, write_sweep

from tiedemb.experiments import cells as sweep_module
from tiedemb.experiments import layout
from tiedemb.experiments.stopping import STOP_SIGNALS_RECEIVED, SweepStopped
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main


def test_sigterm_stops_the_running_cell_records_it_and_ends_the_sweep(tmp_path, fake_runs, monkeypatch, capsys):
    sweep_file = tiny_sweep(tmp_path)
    sweep = load_sweep(sweep_file)
    fake = sweep_module._run_logged
    before = signal.getsignal(signal.SIGTERM)

    def stopped(command, log_file, workdir, heading, threads=None):
        os.kill(os.getpid(), signal.SIGTERM)  # reaches the sweep process while the fit runs
        fake(command, log_file, workdir, heading)
        return 143  # the stage got SIGTERM from the sweep, saved and exited

    monkeypatch.setattr(sweep_module, "_run_logged", stopped)
    with pytest.raises(SweepStopped):
        sweep_module.run_sweep(sweep, tmp_path / "out", echo=lambda _: None)
    status = layout.read_status(tmp_path / "out" / sweep.cells[0].id)
    assert status["state"] == "failed" and status["stages"]["fit"]["returncode"] == 143
    assert status["message"] == "preempted (SIGTERM) in fit: run the sweep again to resume from its last checkpoint"
    assert not (tmp_path / "out" / sweep.cells[1].id).exists()  # the sweep stopped: no further cell
    assert signal.getsignal(signal.SIGTERM) == before  # the sweep's handler is gone again
    assert sweep_main([str(sweep_file), "--out", str(tmp_path / "out2"), "--cell", "0"]) == 143  # the command's status
    assert "stopped by SIGTERM" in capsys.readouterr().err


def test_a_stop_signal_reaches_the_running_stage_as_sigterm(tmp_path):
    """The real stage runner: SIGTERM to the sweep process arrives at the stage's process."""
    ready = tmp_path / "ready"
    child = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )

    def stop_once_ready() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=stop_once_ready)
    with STOP_SIGNALS_RECEIVED.watching():
        sender.start()
        code = sweep_module._run_logged([sys.executable, "-c", child], tmp_path / "log.txt", tmp_path, "test")
        sender.join()
        assert STOP_SIGNALS_RECEIVED.received == [signal.SIGTERM]
    assert code == 143


@pytest.mark.end_to_end
def test_ctrl_c_stops_the_running_cell_and_records_it_interrupted_with_a_checkpoint_to_resume(tmp_path):
    """Ctrl-C in a terminal reaches the sweep and its running stage (one process group): the stage stops
    (its newest checkpoint is the one to resume), and the cell says how to resume."""
    import subprocess

    path = write_sweep(
        tmp_path,
        {
            "name": "t",
            "configs": [str(CONFIGS / "tied.yaml"), str(CONFIGS / "scale" / "tiny.yaml")],
            "overrides": {
                "trainer.max_steps": 100000,
                "trainer.val_check_interval": 50,
                "trainer.enable_progress_bar": False,
            },
        },
    )
    sweep = subprocess.Popen(
        [sys.executable, "-m", "tiedemb.sweep", str(path), "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    # training is under way and has written its periodic last.ckpt (atomically: once there, it is whole)
    while not list((tmp_path / "out").rglob("last.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGINT)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err[-3000:]
    assert "interrupted; run the same command again to continue" in err
    (status_file,) = (tmp_path / "out" / "t").glob(f"*/{layout.STATUS_FILE}")  # the cell's record
    status = layout.read_json(status_file)
    assert (status["state"], status["message"]) == (
        layout.FAILED,
        "interrupted (Ctrl-C) in fit: run the sweep again to resume from its last checkpoint",
    )
    (last,) = status_file.parent.rglob("last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] > 0
