"""The report's curves as W&B's own line charts, beside the PNG files ``plots`` draws.

A chart here is plain data (a title, an x-axis name and named lines of points), built from the
same series as the PNG figures: each loss panel (validation loss against step per variant, from the
measured initial loss at step 0), each dev score against d_e (one line per route) and the effective
rank against d_e. ``log_charts`` hands them to W&B as ``wandb.plot.line_series``, which the W&B UI
draws itself, with zoom, hover values and comparison across report runs.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from tiedemb.experiments.plots import LossPanel, stat_series

CHARTS_PREFIX = "report/charts"
"""Where the charts go in the W&B run (the PNG figures are ``report/<figure>``)."""


@dataclass
class Chart:
    title: str
    xname: str
    lines: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)  # name -> (xs, ys)


def _slug(text: str) -> str:
    """A panel title as part of a W&B key: "tied, d_e = 64" -> "tied_d_e=64"."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", re.sub(r"\s*=\s*", "=", text)).strip("_")


def loss_charts(panels: list[LossPanel]) -> dict[str, Chart]:
    """One chart per loss panel: ``loss_curves``, or ``loss_curves/<panel>`` when there are several."""
    charts = {}
    for panel in panels:
        key = "loss_curves" if len(panels) == 1 else f"loss_curves/{_slug(panel.title)}"
        chart = Chart(f"validation loss: {panel.title}", "step")
        for curve in panel.curves:
            chart.lines[curve.name] = ([float(step) for step in curve.steps], list(curve.means))
        charts[key] = chart
    return charts


def dev_score_charts(rows: list[dict[str, Any]], score_columns: list[str]) -> dict[str, Chart]:
    """One chart per dev score (``dev_score_vs_de/<score>``), one line per route to a width."""
    charts = {}
    routes = list(dict.fromkeys(row.get("route") for row in rows))
    for column in score_columns:
        chart = Chart(f"{column} against d_e", "d_e")
        for route in routes:
            xs, ys, _ = stat_series([row for row in rows if row.get("route") == route], column)
            if xs:
                chart.lines[str(route or column)] = ([float(x) for x in xs], ys)
        if chart.lines:
            charts[f"dev_score_vs_de/{_slug(column)}"] = chart
    return charts


def effective_rank_chart(points: dict[str, dict[int, list[float]]]) -> dict[str, Chart]:
    """The effective rank of the token embedding against d_e, one line per study or variant."""
    chart = Chart("effective rank of the token embedding against d_e", "d_e")
    for name, by_dim in points.items():
        xs = sorted(by_dim)
        if xs:
            chart.lines[name] = ([float(x) for x in xs], [statistics.fmean(by_dim[x]) for x in xs])
    return {"effective_rank_vs_de": chart} if chart.lines else {}


def log_charts(run: Any, charts: dict[str, Chart]) -> list[str]:
    """Log every chart to the W&B ``run`` as a line-series chart; returns the keys logged."""
    import wandb

    logged = {}
    for key, chart in charts.items():
        names = list(chart.lines)
        logged[f"{CHARTS_PREFIX}/{key}"] = wandb.plot.line_series(
            xs=[chart.lines[name][0] for name in names],
            ys=[chart.lines[name][1] for name in names],
            keys=names,
            title=chart.title,
            xname=chart.xname,
        )
    if logged:
        run.log(logged)
    return list(logged)
