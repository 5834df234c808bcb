"""tiedemb dashboard: the panels of both studies, the metrics they name, and saving refused without a server."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from tiny_runs import TINY_TIED

from tiedemb.cli import main as cli_main
from tiedemb.command import main as command_main
from tiedemb.dashboard import main as dashboard_main
from tiedemb.experiments.dashboard import Panel, Section, View, build_workspaces, dev_scores, views
from tiedemb.modules.glue_metrics import DEFAULT_METRICS, TASK_METRICS
from tiedemb.training import metric_names

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def logged_names() -> set[str]:
    """What the modules and the training monitor log, from the constants they log through."""
    constants = {value for name, value in vars(metric_names).items() if name.isupper() and isinstance(value, str)}
    glue = {
        metric_names.eval_name("val", metric)
        for metric in {*DEFAULT_METRICS, *(m for t in TASK_METRICS.values() for m in t)}
    }
    return constants | set(metric_names.MONITOR_METRICS) | glue


def unknown_metrics(found: list[View]) -> dict[str, set[str]]:
    logged = logged_names()
    return {
        panel.title: panel.metric_names() - logged
        for view in found
        for panel in view.panels()
        if panel.metric_names() - logged
    }


def test_every_panel_names_a_metric_the_modules_or_the_monitor_log():
    assert unknown_metrics(views()) == {}
    # and the check sees a renamed one
    renamed = View("v", (Section("s", (Panel("line", "renamed", ("val/lm_loss",)),)),))
    assert unknown_metrics([renamed]) == {"renamed": {"val/lm_loss"}}


def test_dry_run_prints_both_studies_panels_as_json(capsys):
    assert command_main(["dashboard", "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    by_view = {view["name"]: view for view in printed["views"]}
    assert set(by_view) == {"tiedemb: tied embeddings", "tiedemb: embedding width"}
    tied = [panel for section in by_view["tiedemb: tied embeddings"]["sections"] for panel in section["panels"]]
    metrics = {name for panel in tied for name in panel["metrics"]}
    assert {metric_names.VAL_LOSS, metric_names.INIT_LOSS, metric_names.SELF_LOGIT_MARGIN} <= metrics
    assert {metric_names.steps_to_target_name(t) for t in metric_names.STEP_TARGETS} <= metrics
    val_loss = next(panel for panel in tied if panel["metrics"] == [metric_names.VAL_LOSS])
    assert (val_loss["kind"], val_loss["groupby"]) == ("line", "head")  # one line per head, seeds as its band
    initial = next(panel for panel in tied if panel["kind"] == "scatter")
    assert (initial["x"], initial["metrics"]) == (metric_names.INIT_LOSS_PREDICTED, [metric_names.INIT_LOSS])
    width = [panel for section in by_view["tiedemb: embedding width"]["sections"] for panel in section["panels"]]
    against_d_e = {panel["metrics"][0] for panel in width if panel["x"] == "d_e" and panel["x_config"]}
    assert {metric_names.VAL_LOSS, *dev_scores()} <= against_d_e


def test_the_views_become_wandb_workspaces_without_a_network():
    pytest.importorskip("wandb_workspaces")
    found = views()
    workspaces = build_workspaces(found, "entity", "project")
    assert [workspace.name for workspace in workspaces] == [view.name for view in found]
    for workspace, view in zip(workspaces, found):
        assert [len(section.panels) for section in workspace.sections] == [len(s.panels) for s in view.sections]
        workspace._to_model()  # the whole view as W&B's own spec, as saving would send it


def test_saving_without_a_reachable_server_is_one_line_and_saves_nothing(monkeypatch, capsys):
    pytest.importorskip("wandb_workspaces")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    saved = []
    import wandb_workspaces.workspaces as ws

    monkeypatch.setattr(ws.Workspace, "save", lambda self: saved.append(self))
    assert dashboard_main(["--entity", "e", "--project", "p"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the W&B server") and "no view saved" in err
    assert saved == []


def test_without_the_extra_the_error_names_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)
    for name in [name for name in sys.modules if name.startswith("wandb_workspaces.")]:
        monkeypatch.delitem(sys.modules, name)
    assert dashboard_main(["--entity", "e", "--project", "p"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tiedemb[dashboard]" in err


def test_saving_needs_an_entity_and_a_project(capsys):
    with pytest.raises(SystemExit) as exited:
        dashboard_main(["--project", "p"])
    assert exited.value.code == 2 and "--entity" in capsys.readouterr().err


@pytest.mark.end_to_end
def test_a_tiny_run_logs_every_pretraining_metric_the_panels_plot(tmp_path, monkeypatch):
    """The names checked against a real run's CSV: the panels' metrics a run on the embedded corpus logs.

    Left out: the steps to targets below the unigram loss (text data only) and the GLUE dev scores.
    """
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path)}}
    cli_main(
        [
            "fit",
            *TINY_TIED,
            "--trainer.max_steps=3",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.logger={json.dumps([logger])}",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    (metrics,) = tmp_path.rglob("metrics.csv")
    with open(metrics, newline="") as handle:
        columns = set(next(csv.reader(handle)))
    plotted = {name for view in views() for panel in view.panels() for name in panel.metric_names()}
    elsewhere = {metric_names.steps_to_target_name(t) for t in metric_names.STEP_TARGETS} | set(dev_scores())
    assert plotted - elsewhere - columns == set()
