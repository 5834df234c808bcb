"""A sweep cell stopped by its scheduler: SLURM's warning before the time limit requeues it, and it resumes.

No SLURM here: the job array's lines are checked as text; SLURM's side is played by the environment
variables it sets (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_RESTART_COUNT), a signal sent to the
sweep process, and a stand-in ``scontrol`` on PATH that records how it was called.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from reliability_helpers import stand_in_scontrol
from sweep_files import CONFIGS, tiny_sweep, write_sweep

from tiedemb.experiments import cells as sweep_module
from tiedemb.experiments import layout
from tiedemb.experiments.emit import slurm_script
from tiedemb.experiments.requeue import STOP_SIGNALS_RECEIVED
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main


@pytest.fixture
def scontrol(tmp_path, monkeypatch) -> Path:
    """A stand-in ``scontrol`` first on PATH; returns the file its calls are appended to."""
    tools, calls = stand_in_scontrol(tmp_path)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_the_job_array_asks_for_a_warning_before_the_time_limit_and_can_be_requeued(tmp_path):
    script = slurm_script(load_sweep(tiny_sweep(tmp_path)), tmp_path / "out", tmp_path).splitlines()
    # the batch shell alone gets the warning: the sweep (exec-ed) stops and requeues the running cell
    assert "#SBATCH --signal=B:USR1@120" in script and "#SBATCH --requeue" in script
    assert "#SBATCH --open-mode=append" in script  # the requeued task appends to the same log
    assert script[-1].startswith("exec ") and "-m tiedemb.sweep" in script[-1]  # the sweep is the batch shell
    sbatch = [i for i, line in enumerate(script) if line.startswith("#SBATCH")]
    assert all(
        line.startswith("#") or not line for line in script[1 : sbatch[-1]]
    )  # SLURM reads no #SBATCH after a command
    overridden = slurm_script(
        load_sweep(tiny_sweep(tmp_path, slurm={"signal": "B:USR1@600", "requeue": False})), tmp_path / "out", tmp_path
    ).splitlines()
    assert "#SBATCH --signal=B:USR1@600" in overridden and not any(
        "requeue" in line for line in overridden if line.startswith("#SBATCH")
    )


def test_slurms_warning_stops_the_cell_requeues_its_task_and_the_requeued_task_resumes_it(
    tmp_path, fake_runs, scontrol, monkeypatch, capsys
):
    calls, _ = fake_runs
    sweep_file = tiny_sweep(tmp_path)
    out = tmp_path / "out"
    folder = out / load_sweep(sweep_file).all_cells[2].id
    fake = sweep_module._run_logged

    def warned_and_stopped(command, log_file, workdir, heading, threads=None):
        # SLURM's SIGUSR1 reaches the sweep process while the fit runs; the fit saves and exits 143
        fake(command, log_file, workdir, heading)
        os.kill(os.getpid(), signal.SIGUSR1)
        (Path(log_file).parent / "checkpoints").mkdir(exist_ok=True)
        (Path(log_file).parent / "checkpoints" / "last.ckpt").write_bytes(b"")
        return 143

    monkeypatch.setenv("SLURM_JOB_ID", "1002")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "1000")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setattr(sweep_module, "_run_logged", warned_and_stopped)
    assert sweep_main([str(sweep_file), "--out", str(out), "--cell", "2"]) == 143
    assert "stopped by SIGUSR1" in capsys.readouterr().err
    assert scontrol.read_text().split() == ["requeue", "1000_2"]
    status = layout.read_status(folder)
    assert status["state"] == "failed" and status["requeued"] is True and status["attempt"] == 1
    assert status["message"] == (
        "preempted in fit before the time limit (SIGUSR1): SLURM job 1000_2 requeued; "
        "the requeued job resumes it from its checkpoint"
    )
    assert status["slurm"] == {"job": "1000_2"} and status["stages"]["fit"]["returncode"] == 143

    # the requeued task: same array task, SLURM_RESTART_COUNT=1
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setattr(sweep_module, "_run_logged", fake)
    calls.clear()
    assert sweep_main([str(sweep_file), "--out", str(out), "--cell", "2"]) == 0
    status = layout.read_status(folder)
    assert status["state"] == "finished" and status["resumed"] is True and status["attempt"] == 2
    assert status["slurm"] == {"job": "1000_2", "restart_count": 1} and "message" not in status
    assert len(calls) == 1 and "--ckpt_path=last" in calls[0]


def test_without_slurm_the_warning_stops_the_cell_without_requeueing(tmp_path, fake_runs, scontrol, monkeypatch):
    sweep = load_sweep(tiny_sweep(tmp_path))
    fake = sweep_module._run_logged
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)

    def warned(command, log_file, workdir, heading, threads=None):
        os.kill(os.getpid(), signal.SIGUSR1)
        fake(command, log_file, workdir, heading)
        return 143  # the stage got SIGTERM from the sweep

    monkeypatch.setattr(sweep_module, "_run_logged", warned)
    from tiedemb.experiments.requeue import SweepStopped

    with pytest.raises(SweepStopped):
        sweep_module.run_sweep(sweep, tmp_path / "out", echo=lambda _: None)
    status = layout.read_status(tmp_path / "out" / sweep.cells[0].id)
    assert status["state"] == "failed" and status["requeued"] is False and status["stages"]["fit"]["returncode"] == 143
    assert "not requeued (not a SLURM job" in status["message"] and not scontrol.exists()
    assert not (tmp_path / "out" / sweep.cells[1].id).exists()  # the sweep stopped: no further cell
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the sweep's handlers are gone again


def test_a_stop_signal_reaches_the_running_stage_as_sigterm(tmp_path):
    """The real stage runner: SIGUSR1 to the sweep process arrives at the stage's process as SIGTERM."""
    ready = tmp_path / "ready"
    child = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )

    def warn_once_ready() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGUSR1)

    sender = threading.Thread(target=warn_once_ready)
    with STOP_SIGNALS_RECEIVED.watching():
        sender.start()
        code = sweep_module._run_logged([sys.executable, "-c", child], tmp_path / "log.txt", tmp_path, "test")
        sender.join()
        assert STOP_SIGNALS_RECEIVED.requeue
    assert code == 143


@pytest.mark.end_to_end
def test_ctrl_c_saves_the_running_cell_at_its_step_and_records_it_interrupted(tmp_path):
    """Ctrl-C in a terminal reaches the sweep and its running stage (one process group): the stage
    saves its state after its current step, and the cell says how to resume."""
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
    while not list((tmp_path / "out").rglob("step*.ckpt")) and time.monotonic() < deadline:  # training is under way
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
    log = (status_file.parent / layout.LOG_FILE).read_text(encoding="utf-8", errors="replace")
    saved = [line for line in log.splitlines() if line.startswith("Ctrl-C: saved the state after step ")]
    assert len(saved) == 1, log[-3000:]
    step = int(saved[0].split("after step ")[1].split()[0])
    (last,) = status_file.parent.rglob("last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] == step > 0
