"""Runs as the report sees them: labels, state, settings and metric series, read from folders.

A run is a sweep cell (a folder with ``cell.json``) or a plain run's folder (``status.json`` at its
top). Metrics and settings come from Lightning's ``CSVLogger`` versions under it (never W&B's
files); later versions (a resumed attempt, the test stage) win for the same step.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tiedemb.experiments import layout
from tiedemb.training.metric_names import INIT_LOSS, TOKENIZER_FINGERPRINT, VAL_LOSS
from tiedemb.training.status_file import LOST, lost_process

VERSION = re.compile(r"version_(\d+)$")
METRICS_FILE = "metrics.csv"  # what Lightning's CSVLogger writes, beside its hparams.yaml
NOT_METRICS = {"step", "epoch"}


@dataclass
class Run:
    id: str  # path relative to the report folder
    folder: Path
    labels: dict[str, str]
    state: str  # finished, failed, running, lost, waiting or not started
    message: str = ""
    study: str = ""
    hparams: dict[str, Any] = field(default_factory=dict)  # the module's and data module's settings
    config: dict[str, Any] = field(default_factory=dict)  # the resolved CLI config, where recorded
    metrics: dict[str, dict[int, float]] = field(default_factory=dict)  # name -> {step: value}
    workdir: Path | None = None  # where the run was started: relative data paths are relative to it
    tokenizer_fingerprint: str | None = None  # the tokenizer the run trained with, as its attempts logged it
    commit: str | None = None  # the source commit a sweep cell ran (cell.json); None for a plain run
    started: str | None = None  # when its first attempt started (kept across resumed attempts)

    @property
    def ok(self) -> bool:
        """Whether the run's numbers may be averaged: it finished."""
        return self.state == layout.FINISHED

    @property
    def kind(self) -> str:
        """``glue`` (classification metrics), ``pretrain`` (language-model losses) or ``other``."""
        if any(name.split("/", 1)[-1].startswith(("accuracy", "f1", "matthews")) for name in self.metrics):
            return "glue"
        if "head" in self.hparams or INIT_LOSS in self.metrics or VAL_LOSS in self.metrics:
            return "pretrain" if "num_labels" not in self.hparams else "glue"
        return "other"

    def series(self, name: str) -> list[tuple[int, float]]:
        return sorted(self.metrics.get(name, {}).items())

    def first(self, name: str) -> float | None:
        values = self.series(name)
        return values[0][1] if values else None

    def last(self, name: str) -> float | None:
        values = self.series(name)
        return values[-1][1] if values else None


def find_runs(root: str | Path) -> list[Run]:
    """Every run under ``root``: sweep cells, then plain run folders outside any cell."""
    root = Path(root)
    cells = [folder for folder in layout.cell_dirs(root) if not _hidden(folder, root)]
    plain = sorted(
        path.parent
        for path in root.rglob(layout.STATUS_FILE)
        # a CSV logger's version_N holds a copy of its attempt's record: not a run of its own
        if not VERSION.search(path.parent.name)
        and not _hidden(path, root)
        and not any(cell == path.parent or cell in path.parents for cell in cells)
    )
    return [read_run(folder, root) for folder in [*cells, *plain]]


def _csv_versions(folder: Path) -> list[Path]:
    """Every CSV logger version under a run's folder (``csv/version_N``), oldest first."""
    found = [path for path in folder.rglob("version_*") if VERSION.search(path.name) and path.is_dir()]
    return sorted(found, key=lambda path: int(VERSION.search(path.name).group(1)))


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def read_run(folder: Path, root: Path) -> Run:
    """A cell or a plain run's folder: its CSV versions in order, its state from its ``status.json``."""
    cell = layout.read_json(folder / layout.CELL_FILE)
    recorded = cell or {}
    status = layout.read_status(folder) or {}
    run = Run(
        id=str(folder.relative_to(root)) if folder != root else folder.name,
        folder=folder,
        labels=dict(recorded.get("labels") or {}),
        state=str(status.get("state") or layout.RUNNING) if status else "not started",
        message=str(status.get("message") or ""),
        study=str(recorded.get("study") or ""),
        commit=recorded.get("commit"),
        started=status.get("first_started") or status.get("started"),
    )
    if lost_process(status):  # "running", but its process has ended here
        resume = "running the sweep again resumes it" if cell is not None else "--ckpt_path=last resumes it"
        run.state = LOST
        run.message = f"process {status['pid']} ended without recording how (killed, out of memory?); {resume}"
    for version in _csv_versions(folder):  # later versions (a resumed attempt, the test stage) win
        metrics, hparams, config = _read_csv_version(version)
        for name, values in metrics.items():
            run.metrics.setdefault(name, {}).update(values)
        run.hparams = hparams or run.hparams
        run.config = config or run.config
        if hparams.get(TOKENIZER_FINGERPRINT):  # a test-only stage logs none
            run.tokenizer_fingerprint = str(hparams[TOKENIZER_FINGERPRINT])
    if cell is None:  # a plain run: labelled from its settings, its data paths relative to here
        run.labels = derived_labels(run)
        run.study = run.labels.get("task", "pretrain" if run.kind == "pretrain" else run.kind)
        run.workdir = Path.cwd()
    elif cell.get("workdir"):
        run.workdir = Path(cell["workdir"])
    return run


def derived_labels(run: Run) -> dict[str, str]:
    """Labels of a run that no sweep named: its variant, d_e, task and seed from its settings."""
    hp = run.hparams
    labels: dict[str, str] = {}
    if run.kind == "pretrain" and hp.get("head"):
        extras = [
            f"{name}={hp[name]}"
            for name, default in (("embedding_scale", 1.0), ("output_scale", 1.0), ("embedding_init_std", None))
            if hp.get(name, default) != default
        ]
        labels["variant"] = hp["head"] + (f" ({', '.join(extras)})" if extras else "")
    if hp.get("task"):
        labels["task"] = str(hp["task"])
    width = hp.get("embedding_dim") or hp.get("hidden_size")
    if width:
        labels["d_e"] = str(width)
    seed = run.config.get("seed_everything")
    if seed is not None:
        labels["seed"] = str(seed)
    return labels


def _read_csv_version(version: Path) -> tuple[dict[str, dict[int, float]], dict[str, Any], dict[str, Any]]:
    metrics: dict[str, dict[int, float]] = {}
    # An attempt stopped before its first metrics flush leaves a version with hparams.yaml only.
    rows = []
    if (version / METRICS_FILE).is_file():
        with open(version / METRICS_FILE, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    for row in rows:
        step = int(float(row["step"]))
        for name, text in row.items():
            if name not in NOT_METRICS and text:  # CSVLogger leaves a row's other metrics blank
                metrics.setdefault(name, {})[step] = float(text)
    hparams = _read_yaml(version / "hparams.yaml")
    config = hparams.pop("config", None) or {}
    return metrics, hparams, config if isinstance(config, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return content if isinstance(content, dict) else {}
