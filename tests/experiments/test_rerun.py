"""Reruns that repeat: a sweep file's ``threads`` reaches each cell's process, and a cell run twice
with one thread and deterministic algorithms ends with the same losses to the last digit."""

from __future__ import annotations

import csv
import sys

import pytest
from sweep_files import CONFIGS, write_sweep

from tiedemb.errors import UserError
from tiedemb.experiments import cells as sweep_module
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main


def test_threads_reach_the_cells_process_environment(tmp_path):
    child = "import os; print('threads', os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))"
    log = tmp_path / "log.txt"
    assert sweep_module._run_logged([sys.executable, "-c", child], log, tmp_path, "test", 1) == 0
    assert "threads 1 1" in log.read_text()


@pytest.mark.parametrize("value", [0, -2, 1.5, "two", True])
def test_threads_must_be_a_positive_whole_number(tmp_path, value):
    sweep = write_sweep(tmp_path, {"name": "t", "configs": [str(CONFIGS / "tied.yaml")], "threads": value})
    with pytest.raises(UserError, match="threads must be a positive whole number"):
        load_sweep(sweep)


def _final_val_loss(folder):
    (metrics,) = folder.glob("csv/version_*/metrics.csv")
    with open(metrics, newline="", encoding="utf-8") as handle:
        losses = [(int(row["step"]), float(row["val/loss"])) for row in csv.DictReader(handle) if row.get("val/loss")]
    return max(losses)


@pytest.mark.end_to_end
def test_a_cell_run_twice_with_one_thread_and_deterministic_algorithms_repeats_exactly(tmp_path):
    sweep = write_sweep(
        tmp_path,
        {
            "name": "rerun",
            "wandb": False,
            "threads": 1,
            "configs": [str(CONFIGS / "tied_orth.yaml"), str(CONFIGS / "scale" / "tiny.yaml")],
            "overrides": {"trainer.max_steps": 6, "trainer.val_check_interval": 3, "trainer.deterministic": True},
        },
    )
    finals = []
    for out in ("first", "second"):
        assert sweep_main([str(sweep), "--out", str(tmp_path / out)]) == 0
        (cell,) = load_sweep(sweep).cells
        finals.append(_final_val_loss(tmp_path / out / cell.id))
    # the last evaluation (after the 6th step, logged at step 5), the same loss to every digit
    assert finals[0][0] == 5 and finals[0] == finals[1]
