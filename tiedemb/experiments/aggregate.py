"""Statistics over seeds, the report's ``Table``, and the embedding-dimension table of fine-tuned runs.

Only runs that finished are averaged. Runs are grouped by all their labels but the seed, so a table
row is one setting and its ``n`` is its seed count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tiedemb.experiments.claims import t_half_width
from tiedemb.experiments.runs import Run
from tiedemb.training.metric_names import (
    MAJORITY_PREFIX,
    PARAMS_EMBEDDING,
    PARAMS_TOTAL,
    eval_name,
)

SEED_LABEL = "seed"
GLUE_COLUMNS: dict[str, list[tuple[str, str]]] = {
    # task -> (column, metric) in the table's order; other tasks get "<TASK> <metric>" columns
    "mnli": [("MNLI-m acc", "accuracy_matched"), ("MNLI-mm acc", "accuracy_mismatched")],
    "mrpc": [("MRPC acc", "accuracy"), ("MRPC F1", "f1")],
}
MAIN_METRICS = ("accuracy_matched", "accuracy", "matthews")
"""The metric that picks a GLUE run's best dev evaluation, first present wins (as GlueModule's)."""
DEV_SKIPPED = ("loss", "epochs_to_converge")


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation (n - 1 in the denominator; ``None`` for one value) and count."""

    mean: float
    std: float | None
    n: int

    def format(self, digits: int = 3) -> str:
        text = f"{self.mean:.{digits}f}"
        return text if self.std is None else f"{text} ± {self.std:.{digits}f}"

    @property
    def ci95(self) -> float | None:
        """Half-width of the 95% confidence interval of the mean; ``None`` for one value. Student's t:
        with three seeds it is 4.30 standard errors, not the 1.96 of a normal distribution."""
        return None if self.std is None else t_half_width(self.std, self.n)


@dataclass(frozen=True)
class Interval:
    """A ``Stat`` shown as its 95% confidence interval (a table column of its own)."""

    stat: Stat

    def format(self, digits: int = 3) -> str:
        """``[low, high]``: the 95% confidence interval of the mean."""
        half = self.stat.ci95
        return "–" if half is None else f"[{self.stat.mean - half:.{digits}f}, {self.stat.mean + half:.{digits}f}]"


def summarise(values: Iterable[float | None]) -> Stat | None:
    """The ``Stat`` of the finite values given; ``None`` when there are none."""
    kept = [float(value) for value in values if value is not None and math.isfinite(value)]
    if not kept:
        return None
    return Stat(mean=statistics.fmean(kept), std=statistics.stdev(kept) if len(kept) > 1 else None, n=len(kept))


@dataclass
class Table:
    name: str  # file stem of its CSV
    title: str
    rows: list[dict[str, Any]]  # column -> str, int, float, Stat or None
    columns: list[str] = field(default_factory=list)  # default: the rows' keys, in order
    notes: list[str] = field(default_factory=list)
    digits: dict[str, int] = field(default_factory=dict)  # column -> decimals (default 3)
    score_columns: list[str] = field(default_factory=list)  # the dev-score columns, for figures

    def __post_init__(self) -> None:
        self.columns = self.columns or list(dict.fromkeys(key for row in self.rows for key in row))


def group_runs(runs: Iterable[Run]) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[Run]]:
    """Runs by (study, labels other than the seed), in first-seen order."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Run]] = {}
    for run in runs:
        key = (run.study, tuple((label, value) for label, value in run.labels.items() if label != SEED_LABEL))
        groups.setdefault(key, []).append(run)
    return groups


def sort_value(value: str) -> tuple[int, float | str]:
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


# --------------------------------------------------------------------------- the tied-embedding table


def pretraining_runs(runs: Iterable[Run]) -> list[Run]:
    return [run for run in runs if run.ok and run.kind == "pretrain"]


# --------------------------------------------------------------------------- the embedding-dimension table


def glue_runs(runs: Iterable[Run]) -> list[Run]:
    return [run for run in runs if run.ok and run.kind == "glue"]


def task_of(run: Run) -> str:
    return str(run.labels.get("task") or run.hparams.get("task") or run.study or "glue").lower()


def embedding_dim_of(run: Run) -> int | None:
    value = run.labels.get("d_e") or run.hparams.get("embedding_dim") or run.hparams.get("hidden_size")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def dev_scores(run: Run) -> dict[str, float]:
    """The run's dev metrics (``accuracy``, ``f1`` ...) as fractions: the test stage's where the sweep
    tested the best checkpoint (GLUE's test loaders score the dev sets), else those of the validation
    with the best main metric, where that checkpoint was saved."""
    tested = {name: run.last(eval_name("test", name)) for name in _dev_metrics(run, "test")}
    tested = {name: value for name, value in tested.items() if value is not None}
    if tested:
        return tested
    main = next((name for name in MAIN_METRICS if eval_name("val", name) in run.metrics), None)
    if main is None:
        return {}
    best_step = max(run.series(eval_name("val", main)), key=lambda item: item[1])[0]
    values = {name: run.metrics[eval_name("val", name)] for name in _dev_metrics(run, "val")}
    return {name: found[best_step] for name, found in values.items() if best_step in found}


def _dev_metrics(run: Run, stage: str) -> list[str]:
    """The names (``accuracy`` ...) of the dev metrics a run logged in ``stage``, in logged order."""
    prefix = eval_name(stage, "")
    names = [name.removeprefix(prefix) for name in run.metrics if name.startswith(prefix)]
    return [name for name in names if not name.startswith(DEV_SKIPPED)]


def majority_column(column: str) -> str:
    return f"{column} majority"


def task_columns(task: str, scores: Iterable[str]) -> list[tuple[str, str]]:
    if task in GLUE_COLUMNS:
        return GLUE_COLUMNS[task]
    return [(f"{task.upper()} {metric}", metric) for metric in sorted(scores)]


def _percent(stat: Stat | None) -> Stat | None:
    return Stat(100 * stat.mean, None if stat.std is None else 100 * stat.std, stat.n) if stat else None


def _score_columns(chosen: list[Run], tasks: list[str]) -> list[tuple[str, str, str]]:
    found = []
    for task in tasks:
        seen = {name for run in chosen if task_of(run) == task for name in dev_scores(run)}
        found += [(task, column, metric) for column, metric in task_columns(task, seen) if metric in seen]
    return found


def _majority(runs: list[Run], metric: str) -> float | None:
    """The score of always answering the most frequent label, which the runs logged at their start."""
    return next(
        (100 * value for value in (run.last(f"{MAJORITY_PREFIX}{metric}") for run in runs) if value is not None), None
    )


def _dim_row(members: list[Run], metric_columns: list[tuple[str, str, str]], tasks: list[str]) -> dict[str, Any]:
    """A row's numbers in the table's column order."""
    total = summarise(run.last(PARAMS_TOTAL) for run in members)
    embedding = summarise(run.last(PARAMS_EMBEDDING) for run in members)
    of_task = {task: [run for run in members if task_of(run) == task] for task in tasks}
    scores = {
        column: _percent(summarise(dev_scores(run).get(metric) for run in of_task[task]))
        for task, column, metric in metric_columns
    }
    mains = [(task, column, metric) for task, column, metric in metric_columns if metric in MAIN_METRICS]
    return {
        "runs": len(members),
        "total params (M)": total.mean / 1e6 if total else None,
        "embedding params (M)": embedding.mean / 1e6 if embedding else None,
        "embedding share (%)": 100 * embedding.mean / total.mean if total and embedding else None,
        **scores,
        **{majority_column(column): _majority(of_task[task], metric) for task, column, metric in metric_columns},
        **{
            f"{column} 95% CI": Interval(scores[column]) if scores[column] is not None else None
            for _, column, _ in mains
        },
        **{
            f"{column} final": _percent(summarise(run.last(eval_name("val", metric)) for run in of_task[task]))
            for task, column, metric in mains
        },
    }


DIM_NOTES = [
    "dev-set scores in percent: mean ± sample standard deviation over seeds; runs = finished runs averaged",
    "each run's scores come from its best dev evaluation (by accuracy, matched accuracy for MNLI): the "
    "test stage's figures on the best checkpoint where the sweep ran it",
    "parameters: total of the fine-tuned model and its embedding (token, position and segment tables, "
    "the d_e -> hidden projection, the embedding norm)",
    "95% CI: the confidence interval of the mean over seeds (Student's t); final: the main metric at the "
    "run's last dev evaluation, beside the best-of-run figure",
    "majority: the score of always answering the training set's most frequent label, which every run "
    "logs at its start (data/majority/...); – where the runs predate it",
]


def embedding_dim_table(runs: Iterable[Run]) -> Table:
    """d_e, parameters and dev scores per task."""
    chosen = [run for run in glue_runs(runs) if embedding_dim_of(run) is not None]
    # One row per route to a width (the study: pretrained at d_e, SVD-narrowed, re-initialised ...)
    # and d_e, so the routes stand side by side; a single-route sweep has rows per d_e alone.
    routes = list(dict.fromkeys(run.study for run in chosen))
    by_dim: dict[tuple[int, int], list[Run]] = {}
    for run in chosen:
        by_dim.setdefault((routes.index(run.study), embedding_dim_of(run)), []).append(run)
    tasks = list(dict.fromkeys(task_of(run) for run in chosen))
    metric_columns = _score_columns(chosen, tasks)
    rows = []
    for route, dim in sorted(by_dim):
        rows.append({"route": routes[route], "d_e": dim, **_dim_row(by_dim[(route, dim)], metric_columns, tasks)})
    columns = [column for column in rows[0] if column != "route" or len(routes) > 1] if rows else []
    majority = [majority_column(column) for _, column, _ in metric_columns]  # the default 3 decimals
    return Table(
        name="embedding_dim",
        title="Embedding dimension d_e",
        columns=columns,
        rows=rows,
        notes=DIM_NOTES,
        digits={
            **dict.fromkeys(columns, 2),
            "d_e": 0,
            "runs": 0,
            "embedding share (%)": 1,
            **dict.fromkeys(majority, 3),
        },
        score_columns=[column for _, column, _ in metric_columns],
    )
