"""Runs as the report sees them: labels, state, settings and metric series, read from folders.

A run is a sweep cell (a folder with ``cell.json``), or, in a folder of plain ``main.py`` runs, a
run folder (``<run>/csv/version_N`` beside ``<run>/status.json``: ``tiedemb.training.run_dir``) or
a CSV logger version of the layout before run folders (``csv/version_N``, whose ``status.json`` says
how it ended). Metrics, settings and config come from what Lightning's ``CSVLogger`` writes, found
wherever it wrote them under a cell or run folder; W&B's own files are never read, so a report
needs neither a W&B server nor W&B's internal record format.
Within a cell, later CSV versions (a resumed attempt, the test stage) win for the same step.
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
UNKNOWN = "unknown"  # a plain run's state when it left no status.json (written since 0.2.0)


@dataclass
class Run:
    id: str  # path relative to the report folder
    folder: Path
    labels: dict[str, str]
    state: str  # finished, failed, running, or UNKNOWN for plain runs without a status
    message: str = ""
    study: str = ""
    hparams: dict[str, Any] = field(default_factory=dict)  # the module's and data module's settings
    config: dict[str, Any] = field(default_factory=dict)  # the resolved CLI config, where recorded
    metrics: dict[str, dict[int, float]] = field(default_factory=dict)  # name -> {step: value}
    workdir: Path | None = None  # where the run was started: relative data paths are relative to it
    run_id: str = ""  # a plain run's id in its status.json, shared by its resumed attempts
    # The tokenizer the run trained with, as its attempts logged it (a test-only stage logs none).
    tokenizer_fingerprint: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the run's numbers may be averaged: finished, or a plain run without a status that has metrics."""
        return self.state == layout.FINISHED or (self.state == UNKNOWN and bool(self.metrics))

    def continue_with(self, later: Run) -> None:
        """Take in a later CSV version of the same plain run: its metrics win for the same step."""
        for name, values in later.metrics.items():
            self.metrics.setdefault(name, {}).update(values)
        self.state, self.message = later.state, later.message
        self.hparams = later.hparams or self.hparams
        self.config = later.config or self.config
        self.tokenizer_fingerprint = later.tokenizer_fingerprint or self.tokenizer_fingerprint
        _label_plain_run(self)

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

    def checkpoints(self) -> list[Path]:
        """``last*.ckpt`` files under the run's folder, newest first."""
        found = [path for path in self.folder.rglob("last*.ckpt") if path.is_file()]
        return sorted(found, key=lambda path: path.stat().st_mtime_ns, reverse=True)

    def tokenizer(self) -> str | None:
        """The tokenizer the run's data used (a path made absolute, or a hub name), if any."""
        data = (self.config.get("data") or {}).get("init_args") or {}
        name = data.get("tokenizer") or self.hparams.get("tokenizer")
        if not name:
            return None
        path = Path(str(name)).expanduser()
        if not path.is_absolute() and self.workdir is not None and (self.workdir / path).exists():
            return str((self.workdir / path).resolve())
        return str(name)


def find_runs(root: str | Path) -> list[Run]:
    """Every run under ``root``: sweep cells, then plain runs outside any cell.

    A plain run is a CSV logger version, or several: the versions whose ``status.json`` name the
    same run id (a run and its resumed attempts, a ``test`` of its checkpoint) are one run, read
    like a cell's versions (later ones win for the same step; the state is the last one's).
    """
    root = Path(root)
    runs = [read_cell(folder, root) for folder in layout.cell_dirs(root) if not _hidden(folder, root)]
    cells = [run.folder for run in runs]
    inside_cell = lambda path: any(folder in path.parents for folder in cells)  # noqa: E731
    # A CSV logger's folder with metrics, or a version folder with only a status (a run that failed
    # before its first metrics).
    csv_versions = _csv_folders(
        {
            path.parent
            for name in (METRICS_FILE, layout.STATUS_FILE)
            for path in root.rglob(name)
            if (name == METRICS_FILE or VERSION.search(path.parent.name))
            and not inside_cell(path)
            and not _hidden(path, root)
        }
    )
    same_run: dict[str, Run] = {}
    for version in csv_versions:
        run = _plain_run(version, root, *_read_csv_version(version))
        folder = run_folder(version)
        if folder is not None:  # every version in a run folder is an attempt of that run
            run.folder, run.id = folder, str(folder.relative_to(root)) if folder != root else folder.name
        key = f"folder {folder}" if folder is not None else run.run_id
        earlier = same_run.get(key) if key else None
        if earlier is None:
            runs.append(run)
            if key:
                same_run[key] = run
        else:
            earlier.continue_with(run)
    return runs


def _csv_folders(folders: set[Path]) -> list[Path]:
    """Plain runs' CSV logger folders: ``version_N`` by N within their folder, the rest by path."""

    def key(folder: Path) -> tuple[Path, int]:
        number = VERSION.search(folder.name)
        return (folder.parent, int(number.group(1))) if number else (folder, -1)

    return sorted(folders, key=key)


def _cell_csv_folders(folder: Path) -> list[Path]:
    """Every CSV logger folder under a cell, oldest first: its attempts by version, then by when written.

    The CSV logger numbers the attempts that share a folder ``version_0``, ``version_1`` ...; attempts
    or stages in folders of their own (a run folder each) follow the time their files were last written.
    """
    found = {path.parent for name in (METRICS_FILE, "hparams.yaml") for path in folder.rglob(name)}
    found = {path for path in found if (path / METRICS_FILE).is_file() or VERSION.search(path.name)}

    def written(version: Path) -> float:
        files = [version / METRICS_FILE, version / "hparams.yaml"]
        return max((path.stat().st_mtime for path in files if path.is_file()), default=0.0)

    def key(version: Path) -> tuple[int, float, str]:
        number = VERSION.search(version.name)
        return (int(number.group(1)) if number else 0, written(version), str(version))

    return sorted(found, key=key)


def run_folder(version: Path) -> Path | None:
    """The run folder holding a CSV version (``<run>/csv/version_N`` beside ``<run>/status.json``), or
    None for the layout before run folders, where versions of every run shared ``runs/csv/``."""
    folder = version.parent.parent
    return folder if (folder / layout.STATUS_FILE).is_file() else None


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def read_cell(folder: Path, root: Path) -> Run:
    cell = layout.read_json(folder / layout.CELL_FILE) or {}
    status = layout.read_status(folder) or {}
    versions = _cell_csv_folders(folder)
    metrics: dict[str, dict[int, float]] = {}
    hparams: dict[str, Any] = {}
    config: dict[str, Any] = {}
    fingerprint = None
    for version in versions:  # later versions (a resumed attempt, the test stage) win
        found, found_hparams, found_config = _read_csv_version(version)
        for name, values in found.items():
            metrics.setdefault(name, {}).update(values)
        hparams = found_hparams or hparams
        config = found_config or config
        fingerprint = _fingerprint(found_hparams) or fingerprint
    state, message = _state(status, "running the sweep again resumes it") if status else ("not started", "")
    workdir = cell.get("workdir")
    return Run(
        id=str(folder.relative_to(root)),
        folder=folder,
        labels=dict(cell.get("labels") or {}),
        state=state,
        message=message,
        study=str(cell.get("study") or ""),
        hparams=hparams,
        config=config,
        metrics=metrics,
        workdir=Path(workdir) if workdir else None,
        tokenizer_fingerprint=fingerprint,
    )


def _fingerprint(hparams: dict[str, Any]) -> str | None:
    value = hparams.get(TOKENIZER_FINGERPRINT)
    return str(value) if value else None


def _state(status: dict[str, Any], resume: str) -> tuple[str, str]:
    """A status record's state and message; ``running`` whose process has ended here is ``lost``."""
    if lost_process(status):
        return LOST, f"process {status['pid']} ended without recording how (killed, out of memory?); {resume}"
    return str(status.get("state") or layout.RUNNING), str(status.get("message") or "")


def _plain_run(
    folder: Path, root: Path, metrics: dict[str, dict[int, float]], hparams: dict[str, Any], config: dict[str, Any]
) -> Run:
    # The run's own record (training/status_callback.py); runs from before it was written have none.
    status = layout.read_status(folder)
    state, message = _state(status, "--ckpt_path=last resumes it") if status else (UNKNOWN, "")
    run = Run(
        id=str(folder.relative_to(root)),
        folder=folder,
        labels={},
        state=state,
        message=message,
        hparams=hparams,
        config=config,
        metrics=metrics,
        workdir=Path.cwd(),
        run_id=str((status or {}).get("run") or ""),
        tokenizer_fingerprint=_fingerprint(hparams),
    )
    _label_plain_run(run)
    return run


def _label_plain_run(run: Run) -> None:
    run.labels = derived_labels(run)
    run.study = run.labels.get("task", "pretrain" if run.kind == "pretrain" else run.kind)


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
        try:
            step = int(float(row.get("step") or ""))
        except ValueError:
            continue
        for name, text in row.items():
            if name in NOT_METRICS or name is None or text in (None, ""):
                continue
            try:
                metrics.setdefault(name, {})[step] = float(text)
            except ValueError:
                continue
    hparams = _read_yaml(version / "hparams.yaml")
    config = hparams.pop("config", None) or {}
    return metrics, hparams, config if isinstance(config, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return content if isinstance(content, dict) else {}
