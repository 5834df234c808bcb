"""The report over hand-made run folders: files written, failed runs listed, empty folders refused."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time

import pytest
import yaml
from run_folders import glue_metrics, make_cell, pretrain_metrics, write_metrics

from tiedemb.errors import UserError
from tiedemb.experiments.report_writer import build_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def runs_folder(tmp_path):
    for variant, initial in (("tied", 15.0), ("untied", 6.2)):
        for seed, shift in (("0", 0.0), ("1", 0.2)):
            make_cell(
                tmp_path,
                "tied",
                {"variant": variant, "d_e": "64", "seed": seed},
                pretrain_metrics(initial + shift, initial, {9: 5.0 + shift, 19: 4.0 + shift}),
                hparams={"head": variant, "embedding_dim": 64},
            )
    make_cell(
        tmp_path,
        "tied",
        {"variant": "tied", "d_e": "64", "seed": "2"},
        pretrain_metrics(15.0, 15.0, {9: 1e9}),
        hparams={"head": "tied"},
        state="failed",
        message="Traceback ...\nerror: the training loss became nan",
    )
    for dim, total in (("32", 2e6), ("64", 3e6)):
        for seed, accuracy in (("0", 0.70), ("1", 0.72)):
            make_cell(
                tmp_path,
                "mrpc",
                {"d_e": dim, "seed": seed},
                glue_metrics({3: accuracy, 7: accuracy + 0.01}, {3: 0.8, 7: 0.81}, 1.0, total, total / 2),
                hparams={"task": "mrpc", "num_labels": 2, "embedding_dim": int(dim)},
            )
    return tmp_path


def test_report_writes_tables_plots_and_lists_failed_runs(runs_folder):
    path = build_report(runs_folder, wandb=False, echo=lambda _: None)
    text = path.read_text()
    assert "## 1. Tied embeddings" in text and "## 2. Embedding dimension" in text
    assert "| tied | 64 | 2 | 15.100 ± 0.141 | 15.000 ± 0.000 |" in text  # seeds 0 and 1 only
    # best evaluation (step 7) of each seed: 71% and 73%
    assert "| 32 | 2 | 2.00 | 1.00 | 50.0 | 72.00 ± 1.41 | 81.00 ± 0.00 |" in text
    failed = text.split("## 3. Runs not averaged", 1)[1]
    assert "tied/variant=tied,d_e=64,seed=2 | failed | error: the training loss became nan" in failed
    for name in ("loss_curves.png", "dev_score_vs_de.png"):
        assert (runs_folder / name).read_bytes().startswith(PNG_SIGNATURE)
        assert f"]({name})" in text
    with open(runs_folder / "tied_embeddings.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    tied = next(row for row in rows if row["variant"] == "tied")
    assert float(tied["initial loss mean"]) == pytest.approx(15.1) and tied["initial loss n"] == "2"
    with open(runs_folder / "runs.csv", newline="") as handle:
        states = {row["run"]: (row["state"], row["averaged"]) for row in csv.DictReader(handle)}
    assert states["tied/variant=tied,d_e=64,seed=2"] == ("failed", "no")
    assert not list(runs_folder.glob(".*.partial"))  # nothing half-written left behind


def test_report_writes_each_runs_resolved_config_without_the_machines_paths(tmp_path):
    resolved = {
        "seed_everything": 1,
        "trainer": {"default_root_dir": str(tmp_path / "mrpc" / "d_e=32,seed=1")},
        "model": {"init_args": {"pretrained": str(tmp_path / "pretrain" / "d_e=32" / "last.ckpt")}},
        "data": {"init_args": {"data_dir": "../shared/data/glue", "tokenizer": f"{tmp_path}/data/cache/tok"}},
    }
    make_cell(
        tmp_path,
        "mrpc",
        {"d_e": "32", "seed": "1"},
        glue_metrics({3: 0.7}, {3: 0.8}, 1.0, 2e6, 1e6),
        hparams={"task": "mrpc", "num_labels": 2, "embedding_dim": 32, "config": resolved},
    )
    text = build_report(tmp_path, wandb=False, echo=lambda _: None).read_text()
    written = yaml.safe_load((tmp_path / "configs" / "mrpc" / "d_e=32,seed=1.yaml").read_text())
    assert written["seed_everything"] == 1
    assert written["trainer"]["default_root_dir"] == "<out>/mrpc/d_e=32,seed=1"
    assert written["model"]["init_args"]["pretrained"] == "<out>/pretrain/d_e=32/last.ckpt"
    assert written["data"]["init_args"]["data_dir"] == "../shared/data/glue"
    assert str(tmp_path) not in (tmp_path / "configs" / "mrpc" / "d_e=32,seed=1.yaml").read_text()
    assert "`configs/<run>.yaml`" in text


def test_report_without_matplotlib_writes_its_tables_and_says_why_no_figures(runs_folder, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    notes: list[str] = []
    path = build_report(runs_folder, wandb=False, echo=notes.append)
    assert "## 1. Tied embeddings" in path.read_text() and (runs_folder / "tied_embeddings.csv").is_file()
    assert not list(runs_folder.glob("*.png"))
    assert any("matplotlib is not installed" in note and "tiedemb[report]" in note for note in notes)


def plain_run(folder, metrics, settings, record, versions=1):
    """A plain run's folder as ``tiedemb fit`` leaves it: CSV versions, and its record at the top."""
    from tiedemb.training.status_file import write_status

    for version in range(versions):
        write_metrics(folder / "csv" / f"version_{version}", metrics[version] if versions > 1 else metrics, settings)
    write_status(folder, record)


def test_plain_run_folders_are_read_with_labels_from_their_settings(tmp_path):
    from tiedemb.experiments.runs import find_runs

    settings = {"head": "tied", "output_scale": "rsqrt_d", "embedding_dim": 64, "config": {"seed_everything": 3}}
    plain_run(tmp_path / "tied-0a1b", pretrain_metrics(15.0, 15.0, {9: 5.0}), settings, {"state": "finished"})
    (run,) = find_runs(tmp_path)
    assert run.id == "tied-0a1b" and run.ok and run.kind == "pretrain"
    assert run.labels == {"variant": "tied (output_scale=rsqrt_d)", "d_e": "64", "seed": "3"}


def test_the_report_averages_finished_plain_runs_and_lists_the_others(tmp_path):
    metrics = pretrain_metrics(15.0, 15.0, {9: 5.0})
    settings = {"head": "tied", "embedding_dim": 64}
    plain_run(tmp_path / "a", metrics, settings, {"state": "finished"})
    plain_run(tmp_path / "b", metrics, settings, {"state": "failed", "message": "RuntimeError: nan"})
    plain_run(tmp_path / "c", {}, settings, {"state": "failed", "message": "ValueError: before any metrics"})
    text = build_report(tmp_path, wandb=False, echo=lambda _: None).read_text()
    assert "runs: 3 (2 failed, 1 finished); averaged: 1" in text
    not_averaged = text.split("Runs not averaged", 1)[1]
    assert "| b | failed | RuntimeError: nan |" in not_averaged
    assert "| c | failed | ValueError: before any metrics |" in not_averaged


def test_the_versions_of_a_resumed_plain_run_are_one_run(tmp_path):
    from tiedemb.experiments.runs import find_runs

    settings = {"head": "tied", "embedding_dim": 64}
    attempts = [pretrain_metrics(15.0, 15.0, {9: 5.0}), {"val/loss": {9: 5.0, 19: 4.0}}]  # resumed at step 9
    plain_run(tmp_path / "a", attempts, settings, {"state": "finished"}, versions=2)
    plain_run(tmp_path / "b", pretrain_metrics(15.5, 15.0, {9: 5.5, 19: 4.5}), settings, {"state": "finished"})
    first, other = find_runs(tmp_path)
    assert (first.id, first.state, first.ok, other.id) == ("a", "finished", True, "b")
    assert first.series("val/loss") == [(9, 5.0), (19, 4.0)] and first.first("init/loss") == 15.0
    text = build_report(tmp_path, wandb=False, echo=lambda _: None).read_text()
    assert "runs: 2 (2 finished); averaged: 2" in text
    assert "| tied | 64 | 2 | 15.250 ± 0.354 |" in text  # two runs, not three


def test_a_run_whose_process_ended_without_a_word_is_lost_not_running(tmp_path):
    import socket

    from tiedemb.experiments.runs import find_runs
    from tiedemb.training.status_file import write_status

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    here = socket.gethostname()
    records = {
        "killed": {"state": "running", "host": here, "pid": ended.pid},  # SIGKILLed, say
        "running": {"state": "running", "host": here, "pid": os.getpid()},  # still running
        "elsewhere": {"state": "running", "host": "another-host", "pid": ended.pid},
    }  # can't tell
    for name, record in records.items():
        write_status(tmp_path / name, {**record, "run": name})
    make_cell(
        tmp_path / "sweep",
        "tied",
        {"variant": "tied"},
        pretrain_metrics(15.0, 15.0, {9: 5.0}),
        hparams={"head": "tied"},
        state="running",
    )
    write_status(tmp_path / "sweep" / "tied" / "variant=tied", {"state": "running", "host": here, "pid": ended.pid})
    runs = {run.id: run for run in find_runs(tmp_path)}
    assert {name: run.state for name, run in runs.items()} == {
        "sweep/tied/variant=tied": "lost",
        "killed": "lost",
        "running": "running",
        "elsewhere": "running",
    }
    assert runs["killed"].message == (
        f"process {ended.pid} ended without recording how (killed, out of memory?); --ckpt_path=last resumes it"
    )
    assert runs["sweep/tied/variant=tied"].message.endswith("running the sweep again resumes it")


@pytest.mark.end_to_end
def test_report_on_an_empty_folder_says_so(tmp_path):
    with pytest.raises(UserError, match="holds no runs"):
        build_report(tmp_path, wandb=False)
    result = subprocess.run(
        [sys.executable, "-m", "tiedemb.report", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "error:" in result.stderr and "holds no runs" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.end_to_end
def test_report_logs_tables_and_figures_to_an_offline_wandb_run(runs_folder, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    build_report(runs_folder, echo=lambda _: None)
    logs = list((runs_folder / ".report").rglob("run-*.wandb"))
    assert len(logs) == 1
    from wandb_records import read_wandb_run

    expected = {"tied_embeddings", "embedding_dim", "runs", "loss_curves", "dev_score_vs_de"}
    # W&B's service writes the offline log behind the process: on a busy machine the history
    # records can land a moment after finish() returns, so the read is retried for a bounded time.
    deadline = time.monotonic() + 60
    while True:
        run = read_wandb_run(logs[0])
        logged = {key.split("/")[1] for row in run.history for key in row if key.startswith("report/")}
        if expected <= logged or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert expected <= logged
    history = {key: value for row in run.history for key, value in row.items()}
    assert history["report/tied_embeddings/_type"] == "table-file"  # the table as a wandb.Table


def test_the_report_run_goes_online_when_credentials_exist_and_the_server_answers(runs_folder, monkeypatch):
    import wandb

    import tiedemb.training.hub as wandb_mode

    calls = []

    class FakeRun:
        id, offline = "fake", False

        def log(self, values):
            calls.append(("log", sorted(values)))

        def finish(self):
            calls.append(("finish", None))

    def fake_init(**kwargs):
        calls.append(("init", (kwargs.get("mode"), os.environ.get("WANDB_MODE"))))
        return FakeRun()

    monkeypatch.setattr(wandb, "init", fake_init)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(wandb_mode, "server_problem", lambda timeout=3.0: None)  # the server answers
    build_report(runs_folder, echo=lambda _: None)
    assert calls[0] == ("init", (None, None))  # nothing forces it offline
    assert ("log", ["report/runs"]) in calls and calls[-1] == ("finish", None)
    calls.clear()
    monkeypatch.setattr(wandb_mode, "server_problem", lambda timeout=3.0: "the W&B server is unreachable")
    build_report(runs_folder, echo=lambda _: None)
    assert calls[0] == ("init", (None, "offline"))
    calls.clear()
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("NETRC", str(runs_folder / "no-netrc"))
    build_report(runs_folder, echo=lambda _: None)
    assert calls[0] == ("init", (None, "offline"))  # no credentials: offline, as for training runs
