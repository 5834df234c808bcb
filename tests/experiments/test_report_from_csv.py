"""The report reads the CSV metrics Lightning writes, and nothing of W&B's."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tiedemb.experiments.cells import run_sweep
from tiedemb.experiments.report_writer import build_report
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
