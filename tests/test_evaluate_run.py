"""Evaluating a run from anywhere: ``validate RUN_DIR``, ``validate --ckpt_path FILE`` and ``test RUN_DIR``.

A tiny run of the README's quick start config (``configs/tied_orth.yaml``, at the tiny scale) with
``--run_name a`` in a project folder that holds ``data/cache``, evaluated by ``python main.py`` from
another folder that holds one too: the model, the data settings and the Trainer's limits come from
the run, so the validation loss printed is the one the run logged for that checkpoint.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiedemb.cli import main

pytestmark = pytest.mark.end_to_end  # real runs of the command line

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
QUICK_START = ["--config", str(CONFIGS / "tied_orth.yaml"), "--config", str(CONFIGS / "scale" / "tiny.yaml")]
QUIET = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled"}


@pytest.fixture(scope="module")
def project(tmp_path_factory, one_thread) -> Path:
    """A project folder with ``data/cache`` in which ``fit --run_name a`` of the quick start config ran."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "data" / "cache").mkdir(parents=True)
    # as a user runs it: its own process, with the default loggers
    command = [sys.executable, str(ROOT / "main.py"), "fit", *QUICK_START, "--run_name", "a"]
    done = subprocess.run(
        [*command, "--trainer.enable_progress_bar=false"],
        cwd=folder,
        env={**os.environ, **QUIET},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """Another working folder, with a cache folder of its own."""
    (tmp_path / "data" / "cache").mkdir(parents=True)
    return tmp_path


def logged_val_loss(run: Path, checkpoint: Path) -> float:
    """The val/loss the run's metrics CSV holds for the step ``checkpoint`` was written at."""
    step = torch.load(checkpoint, weights_only=True)["global_step"]
    with (run / "csv" / "version_0" / "metrics.csv").open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("val/loss")]
    # Lightning logs a validation at the step index of the batch it followed: one below global_step
    (row,) = [row for row in rows if int(row["step"]) == step - 1]
    return float(row["val/loss"])


def printed(output: str, metric: str) -> float:
    """The value Lightning's results table prints for ``metric``."""
    (value,) = re.findall(rf"{re.escape(metric)}\W+([-+0-9.e]+)", output)
    return float(value)


def main_py_together(folder: Path, *command_lines: list[str]) -> list[subprocess.CompletedProcess]:
    """``python <project>/main.py ARGS`` for each command line, run in ``folder`` as a user in another
    folder types it; started together, as each spends seconds importing."""
    started = [
        (
            args,
            subprocess.Popen(
                [sys.executable, str(ROOT / "main.py"), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=folder,
                env={**os.environ, **QUIET},
            ),
        )
        for args in command_lines
    ]
    done = []
    for args, process in started:
        stdout, stderr = process.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(args, process.returncode, stdout, stderr))
    return done


def test_validate_from_another_folder_prints_the_loss_the_run_logged(project, elsewhere):
    """``validate <project>/runs/a`` (its best.ckpt) and
    ``validate --ckpt_path <project>/runs/a/checkpoints/last.ckpt``."""
    run = project / "runs" / "a"
    best, last = run / "checkpoints" / "best.ckpt", run / "checkpoints" / "last.ckpt"
    by_folder, by_file = main_py_together(elsewhere, ["validate", str(run)], ["validate", "--ckpt_path", str(last)])
    for done, checkpoint in ((by_folder, best), (by_file, last)):
        assert done.returncode == 0, done.stderr[-3000:]
        assert round(printed(done.stdout, "val/loss"), 4) == round(logged_val_loss(run, checkpoint), 4)
    assert f"evaluating {best}" in by_folder.stderr.splitlines()
    # the checkpoint callback's state is of no use to an evaluation: Lightning's warning about it is not shown
    assert "dirpath has changed" not in by_folder.stderr + by_file.stderr


def test_test_of_a_pretraining_run_scores_its_held_out_text(project, elsewhere, monkeypatch):
    """Its test split is the held-out validation text: at the run's two validation batches, test/loss is val/loss."""
    run = project / "runs" / "a"
    monkeypatch.chdir(elsewhere)
    cli = main(["test", str(run), "--trainer.limit_test_batches=2", "--trainer.logger=false"])
    assert float(cli.trainer.callback_metrics["test/loss"]) == pytest.approx(
        logged_val_loss(run, run / "checkpoints" / "best.ckpt"), abs=1e-6
    )


def test_the_runs_limits_are_restored_and_an_override_is_said(project, elsewhere, monkeypatch, capsys):
    run = project / "runs" / "a"
    monkeypatch.chdir(elsewhere)
    cli = main(["validate", str(run), "--trainer.logger=false"])
    assert cli.trainer.limit_val_batches == 2  # configs/scale/tiny.yaml's, not Lightning's 1.0
    capsys.readouterr()
    cli = main(["validate", str(run), "--trainer.limit_val_batches=1", "--trainer.logger=false"])
    assert cli.trainer.limit_val_batches == 1
    assert "trainer.limit_val_batches: 2 (the run's config.yaml) -> 1 (command line)" in capsys.readouterr().err


def test_a_run_folder_without_a_checkpoint_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "runs" / "x" / "checkpoints").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["test", "runs/x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.strip()] == [
        "error: run folder 'runs/x' has no checkpoint (it holds none): the run ended before its first "
        "validation saved one"
    ]
    with pytest.raises(SystemExit) as exited:
        main(["validate", "runs/nothing"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().startswith("error: validate runs/nothing: no such run folder")
