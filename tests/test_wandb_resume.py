"""A run resumed with --ckpt_path=last, or a checkpoint file, continues the W&B run it resumes (offline here:
same run id)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_runs import TINY_TIED

from tiedemb.training.wandb_mode import WANDB_ID_KEY

pytestmark = pytest.mark.end_to_end  # runs the real command line

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def fit(folder: Path, *extra: str, subcommand: str = "fit") -> subprocess.CompletedProcess:
    # Each run starts its own W&B service, as a user's separate commands do: a service this test
    # process may have started (WANDB_SERVICE) would still hold the first run's id.
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        str(ROOT / "main.py"),
        subcommand,
        *TINY_TIED,
        "--trainer.enable_progress_bar=false",
        *extra,
    ]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def run_ids(folder: Path) -> list[str]:
    """The ids of the offline W&B run folders (``offline-run-<time>-<id>``), oldest first."""
    found = sorted(folder.glob("runs/*/wandb/offline-run-*"), key=lambda path: path.name)  # by start time
    return [path.name.rsplit("-", 1)[1] for path in found]


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path):
    first = fit(tmp_path, "--trainer.max_steps=3")
    assert first.returncode == 0, first.stderr[-3000:]
    last = next(tmp_path.glob("runs/**/last.ckpt"))
    written_id = torch.load(last, weights_only=True)[WANDB_ID_KEY]
    assert run_ids(tmp_path) == [written_id]

    resumed = fit(tmp_path, "--trainer.max_steps=6", "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    assert run_ids(tmp_path) == [written_id, written_id], "the resumed run started another W&B run"

    by_file = fit(tmp_path, "--trainer.max_steps=9", f"--ckpt_path={last}")  # the checkpoint named as a file
    assert by_file.returncode == 0, by_file.stderr[-3000:]
    assert run_ids(tmp_path) == [written_id] * 3, "a run resumed from a named checkpoint started another W&B run"

    fresh = fit(tmp_path, "--trainer.max_steps=3")  # no --ckpt_path: a new run, a new id
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    ids = run_ids(tmp_path)
    assert len(ids) == 4 and ids[3] != written_id

    # Scoring the run's checkpoint (a W&B run and checkpoint folder of its own): Lightning's warning
    # that the checkpoint callback's state "won't be reloaded" says nothing that matters here.
    scored = fit(tmp_path, f"--ckpt_path={last}", subcommand="validate")
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "val/loss" in scored.stdout and "dirpath has changed" not in scored.stderr, scored.stderr[-3000:]
