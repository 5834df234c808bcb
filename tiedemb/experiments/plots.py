"""The report's figures as PNG files, each written atomically; a function returns the path written, or
``None`` when there is nothing to draw or matplotlib is not installed (the tables do not need it).
"""

from __future__ import annotations

import io
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tiedemb.experiments.aggregate import SEED_LABEL, Stat, group_runs, pretraining_runs
from tiedemb.experiments.runs import Run
from tiedemb.training.files import atomic_write_bytes
from tiedemb.training.metric_names import BIGRAM_LOSS, INIT_LOSS, INIT_LOSS_PREDICTED, LOG_N, UNIGRAM_LOSS, VAL_LOSS

MISSING = 'no figures: matplotlib is not installed (pip install "tiedemb[report]")'


def pyplot() -> Any:
    # Imported on first use: the report's tables and every other command run without matplotlib.
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # files only: no display on clusters and CI
    import matplotlib.pyplot as plt

    return plt


DPI = 120


def save(figure: Any, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    pyplot().close(figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _mean_curve(runs: list[Run], metric: str) -> tuple[list[int], list[float], list[float]]:
    """Steps every run logged, the mean there, and the sample std (0 for one run)."""
    steps = sorted(set.intersection(*(set(run.metrics.get(metric, {})) for run in runs))) if runs else []
    means, stds = [], []
    for step in steps:
        values = [run.metrics[metric][step] for run in runs]
        means.append(statistics.fmean(values))
        stds.append(statistics.stdev(values) if len(values) > 1 else 0.0)
    return steps, means, stds


def _panels(runs: Iterable[Run]) -> list[tuple[str, list[Run]]]:
    """The pretraining runs with a validation curve by study and d_e, titled, in display order."""
    grouped: dict[tuple[str, str], list[Run]] = {}
    for run in pretraining_runs(runs):
        if run.metrics.get(VAL_LOSS):
            grouped.setdefault((run.study, run.labels.get("d_e", "")), []).append(run)
    keys = sorted(grouped, key=lambda key: (key[0], len(key[1]), key[1]))
    several_studies = len({study for study, _ in keys}) > 1
    panels = []
    for study, d_e in keys:
        title = ", ".join(
            part for part in ((study if several_studies else ""), (f"d_e = {d_e}" if d_e else "")) if part
        )
        panels.append((title or "validation loss", grouped[(study, d_e)]))
    return panels


def _curve_name(study: str, labels: tuple[tuple[str, str], ...]) -> str:
    """A variant's legend entry: its labels but d_e and the seed (the variant's value bare)."""
    shown = [
        value if label == "variant" else f"{label}={value}"
        for label, value in labels
        if label not in ("d_e", SEED_LABEL)
    ]
    return ", ".join(shown) or study


def _variant_curves(axis: Any, zoomed: Any, colour: str, name: str, members: list[Run]) -> None:
    """One variant's mean validation curve with its ± std band on both rows, and its initial losses on the top."""
    steps, means, stds = _mean_curve(members, VAL_LOSS)
    initial = [run.first(INIT_LOSS) for run in members if run.first(INIT_LOSS) is not None]
    if initial:  # the curve starts where the untrained model stood
        steps = [0, *steps]
        means = [statistics.fmean(initial), *means]
        stds = [statistics.stdev(initial) if len(initial) > 1 else 0.0, *stds]
    # top: from the measured initial loss; bottom: from the first evaluation on
    start = 1 if initial else 0
    for each, first, label in ((axis, 0, f"{name} (n={len(members)})"), (zoomed, start, name)):
        xs, ys, spread = steps[first:], means[first:], stds[first:]
        each.plot(xs, ys, color=colour, label=label)
        lows, highs = [m - s for m, s in zip(ys, spread)], [m + s for m, s in zip(ys, spread)]
        each.fill_between(xs, lows, highs, color=colour, alpha=0.2, linewidth=0)
    if initial:
        axis.plot([0], [means[0]], "o", color=colour)
    predicted = [value for value in (run.first(INIT_LOSS_PREDICTED) for run in members) if value is not None]
    if predicted:
        axis.plot([0], [statistics.fmean(predicted)], "x", color=colour, markersize=10, markeredgewidth=2)


def loss_curves(runs: Iterable[Run], path: Path) -> Path | None:
    """Validation loss against step per variant (mean ± std over seeds), one column per study and d_e:
    on top from the measured initial loss (circle; predicted: cross; ln n dashed), below from the first
    evaluation on, where the variants' differences show at their own scale; unigram and bigram losses in both."""
    plt = pyplot()
    if plt is None:
        return None
    panels = _panels(runs)
    if not panels:
        return None
    figure, axes = plt.subplots(2, len(panels), figsize=(6.4 * len(panels), 9.0), squeeze=False, sharey="row")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for column, (title, panel_runs) in enumerate(panels):
        axis, zoomed = axes[0][column], axes[1][column]
        for number, ((study, labels), members) in enumerate(group_runs(panel_runs).items()):
            _variant_curves(axis, zoomed, colours[number % len(colours)], _curve_name(study, labels), members)
        log_n = [run.first(LOG_N) for run in panel_runs if run.first(LOG_N) is not None]
        if log_n:
            axis.axhline(statistics.fmean(log_n), color="grey", linestyle="--", linewidth=1, label="ln n (uniform)")
        # the losses of token frequencies and pairs on the same validation blocks (runs on text log them)
        for metric, style, name in ((UNIGRAM_LOSS, ":", "unigram"), (BIGRAM_LOSS, "-.", "bigram")):
            values = [value for value in (run.first(metric) for run in panel_runs) if value is not None]
            if values:
                for each in (axis, zoomed):
                    each.axhline(
                        statistics.fmean(values), color="black", linestyle=style, linewidth=1, label=f"{name} (add-one)"
                    )
        axis.plot([], [], "x", color="black", label="predicted initial loss")
        axis.plot([], [], "o", color="black", label="measured initial loss")
        axis.set_title(title)
        zoomed.set_title(f"{title}: from the first evaluation")
        for each in (axis, zoomed):
            each.set_xlabel("step")
            each.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0][0].set_ylabel("validation loss (nats/token)")
    axes[1][0].set_ylabel("validation loss (nats/token)")
    return save(figure, path)


def dev_score_vs_dim(rows: list[dict[str, Any]], score_columns: list[str], path: Path) -> Path | None:
    """Dev scores against d_e (mean ± std over seeds)."""
    plt = pyplot()
    if plt is None:
        return None
    columns = [column for column in score_columns if any(isinstance(row.get(column), Stat) for row in rows)]
    if not rows or not columns:
        return None
    figure, axis = plt.subplots(figsize=(7.2, 4.6))
    routes = list(dict.fromkeys(row.get("route") for row in rows))
    for route in routes:  # one line per route to a width (pretrained at d_e, SVD-narrowed, ...)
        for column in columns:
            points = [(row["d_e"], row[column]) for row in rows if row.get("route") == route and row.get(column)]
            xs, stats = [x for x, _ in points], [stat for _, stat in points]
            label = f"{route}: {column}" if len(routes) > 1 else column
            errors = [stat.std or 0.0 for stat in stats]
            axis.errorbar(xs, [stat.mean for stat in stats], yerr=errors, marker="o", capsize=4, label=label)
    axis.set_xlabel("embedding dimension d_e")
    axis.set_ylabel("dev score (%)")
    axis.set_xticks(sorted({row["d_e"] for row in rows}))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title("Dev score against embedding dimension")
    return save(figure, path)


def gap_to_full_width(
    curves: dict[str, dict[str, list[tuple[int, float, float, float]]]], reference: str, path: Path
) -> Path | None:
    """Each width's validation loss minus the full width's against steps (``width_study.gap_curves``):
    the mean over seeds as a line, the seeds' range as a band, one panel per study."""
    plt = pyplot()
    if plt is None:
        return None
    studies = [study for study, levels in curves.items() if any(levels.values())]
    if not studies:
        return None
    figure, axes = plt.subplots(1, len(studies), figsize=(7.2 * len(studies), 4.6), squeeze=False)
    for axis, study in zip(axes[0], studies):
        for level, points in curves[study].items():
            if not points:
                continue
            steps = [point[0] for point in points]
            (line,) = axis.plot(steps, [point[1] for point in points], label=f"d_e {level}")
            axis.fill_between(
                steps, [point[2] for point in points], [point[3] for point in points], color=line.get_color(), alpha=0.2
            )
        axis.axhline(0.0, color="grey", linestyle=":", zorder=0)
        axis.set_xlabel("step")
        axis.set_ylabel(f"val loss minus {reference} (nats)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        axis.set_title(f"{study}: gap to the full width (band: the seeds' range)")
    return save(figure, path)
