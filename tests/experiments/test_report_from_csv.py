"""The report reads the CSV metrics Lightning writes, wherever a cell or run keeps them, and nothing of W&B's."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from run_folders import make_cell, pretrain_metrics, write_metrics

from tiedemb.experiments.cells import run_sweep
from tiedemb.experiments.report_writer import build_report
from tiedemb.experiments.runs import find_runs
from tiedemb.experiments.sweep_file import load_sweep

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TABLES = ("run_metrics.csv", "curves.csv", "convergence.csv", "baselines.csv")


def tables(folder: Path) -> dict[str, str]:
    found = {name: (folder / name).read_text(encoding="utf-8") for name in TABLES if (folder / name).is_file()}
    assert found, f"no tables in {folder}"
    return found


def without_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B off: the package cannot be imported, so nothing of it can be read."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    for name in [name for name in sys.modules if name == "wandb" or name.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "wandb", None)


def test_a_cells_csv_is_read_wherever_its_logger_wrote_it(tmp_path, monkeypatch):
    """csv/version_N (a sweep's own layout) or a run folder of its own inside the cell: the same run."""
    without_wandb(monkeypatch)
    metrics = pretrain_metrics(15.0, 15.0, {9: 5.0, 19: 4.0})
    make_cell(tmp_path / "a", "tied", {"variant": "tied", "seed": "0"}, metrics, hparams={"head": "tied"})
    new = make_cell(tmp_path / "b", "tied", {"variant": "tied", "seed": "0"}, {}, hparams={"head": "tied"})
    shutil.rmtree(new / "csv")
    write_metrics(new / "tied-3f2a" / "csv", metrics, {"head": "tied"})  # one folder per run, any depth
    (run_a,), (run_b,) = find_runs(tmp_path / "a"), find_runs(tmp_path / "b")
    assert run_a.metrics == run_b.metrics and run_b.metrics["val/loss"] == {9: 5.0, 19: 4.0}
    assert run_b.hparams == {"head": "tied"} and run_b.ok
    # a later stage in a folder of its own wins for the same step
    write_metrics(new / "tied-3f2a-test" / "csv", {"val/loss": {19: 3.5}}, {"head": "tied"})
    (run_b,) = find_runs(tmp_path / "b")
    assert run_b.metrics["val/loss"] == {9: 5.0, 19: 3.5}


def test_a_plain_runs_metrics_csv_outside_a_version_folder_is_a_run(tmp_path, monkeypatch):
    from tiedemb.training.status_file import write_status

    without_wandb(monkeypatch)
    write_metrics(tmp_path / "tied-abc123", pretrain_metrics(15.0, 15.0, {9: 5.0}), {"head": "tied"})
    write_status(tmp_path / "tied-abc123", {"state": "finished"})
    (run,) = find_runs(tmp_path)
    assert run.id == "tied-abc123" and run.labels["variant"] == "tied" and run.metrics["val/loss"] == {9: 5.0}


@pytest.mark.end_to_end
def test_the_report_of_a_sweep_gives_the_same_tables_from_its_csv_alone(tmp_path, monkeypatch):
    """A real sweep, W&B recording offline beside the CSV: with W&B's folders gone and W&B off, the same tables."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "wandb": {"project": "tiedemb-test"},
                "configs": [str(CONFIGS / "tied.yaml"), str(CONFIGS / "scale" / "tiny.yaml")],
                "grid": {"model.head": ["tied", "untied"]},
                "overrides": {"trainer.max_steps": 4, "trainer.val_check_interval": 2, "trainer.limit_val_batches": 1},
            }
        ),
        encoding="utf-8",
    )
    with_wandb = tmp_path / "out"
    outcome = run_sweep(load_sweep(sweep_file), with_wandb, echo=lambda _: None)
    assert len(outcome["finished"]) == 2, outcome
    assert list(with_wandb.rglob("run-*.wandb")), "the cells recorded W&B runs too"
    csv_only = tmp_path / "csv-only"
    shutil.copytree(with_wandb, csv_only)
    build_report(with_wandb, echo=lambda _: None)

    for folder in [path for path in csv_only.rglob("wandb") if path.is_dir()]:
        shutil.rmtree(folder)
    assert not list(csv_only.rglob("run-*.wandb"))
    without_wandb(monkeypatch)
    build_report(csv_only, echo=lambda _: None)
    assert tables(csv_only) == tables(with_wandb)
    runs = {row.split(",")[0] for row in tables(csv_only)["run_metrics.csv"].splitlines()[1:]}
    assert runs == {"t/variant=tied", "t/variant=untied"}
