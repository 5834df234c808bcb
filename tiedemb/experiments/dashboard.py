"""The W&B views of the two studies, as data, then as W&B workspaces (``tiedemb dashboard``).

Each view is a list of sections of panels. A panel here is plain data (what it plots, against
what, grouped by which setting) that names metrics only through ``training/metric_names.py`` and
the GLUE task table, so a panel cannot name a metric nobody logs without its test failing. It is
turned into a ``wandb-workspaces`` panel only when the views are saved: the package (the
``dashboard`` extra) is needed for saving, not for ``--dry-run``.

* **tied embeddings**: validation loss by head, mean and spread over seeds; measured against
  predicted initial loss; the steps each head took to each target below the unigram loss; the
  self-logit margin, token-table statistics and gradient norms by head.
* **embedding width**: the final validation loss and each GLUE dev score against d_e; the
  effective rank of the token table against d_e; validation loss by d_e.

Runs are grouped by the settings every run records in its W&B config: the module's ``head``,
and ``d_e`` and ``seed_everything`` (``training/wandb_names.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tiedemb.errors import UserError
from tiedemb.modules.glue_metrics import DEFAULT_METRICS, TASK_METRICS
from tiedemb.training import metric_names as names
from tiedemb.training.wandb_names import D_E_KEY, HEAD_KEY

EXTRA = "dashboard"
"""The optional dependency group that installs wandb-workspaces."""
STEP = "Step"  # W&B's x-axis of a history panel


@dataclass(frozen=True)
class Panel:
    """One chart. ``line``: metrics' histories against the step; ``scatter``: one run's final
    ``y`` against a config setting or a final metric ``x``; ``bar``: final metrics per group."""

    kind: Literal["line", "scatter", "bar"]
    title: str
    metrics: tuple[str, ...]  # y: logged metric names
    x: str = STEP  # line: the step; scatter: a config key (x_config) or a logged metric
    x_config: bool = False
    groupby: str | None = None  # a W&B config key: runs that share it are one line or bar (mean, std band)

    def metric_names(self) -> set[str]:
        """The logged metrics this panel reads (config keys and the step are not metrics)."""
        return {*self.metrics, *([self.x] if self.kind == "scatter" and not self.x_config else [])}


@dataclass(frozen=True)
class Section:
    name: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class View:
    name: str
    sections: tuple[Section, ...] = field(default_factory=tuple)

    def panels(self) -> list[Panel]:
        return [panel for section in self.sections for panel in section.panels]


def dev_scores() -> list[str]:
    """Every GLUE dev metric a fine-tuning run logs on its (first) dev split."""
    metrics = dict.fromkeys([*DEFAULT_METRICS, *(name for task in TASK_METRICS.values() for name in task)])
    return [names.eval_name("val", metric) for metric in metrics]


def by_head(kind: Literal["line", "bar"], title: str, *metrics: str) -> Panel:
    return Panel(kind, title, tuple(metrics), groupby=HEAD_KEY)


def against_d_e(title: str, metric: str) -> Panel:
    return Panel("scatter", title, (metric,), x=D_E_KEY, x_config=True)


def tied_view() -> View:
    return View(
        "tiedemb: tied embeddings",
        (
            Section(
                "validation loss", (by_head("line", "validation loss by head (mean, std over seeds)", names.VAL_LOSS),)
            ),
            Section(
                "initial loss",
                (
                    Panel(
                        "scatter",
                        "measured against predicted initial loss",
                        (names.INIT_LOSS,),
                        x=names.INIT_LOSS_PREDICTED,
                    ),
                    by_head(
                        "bar",
                        "initial loss by head: measured and predicted",
                        names.INIT_LOSS,
                        names.INIT_LOSS_PREDICTED,
                    ),
                ),
            ),
            Section(
                "steps to each target below the unigram loss",
                (
                    by_head(
                        "bar", "steps to unigram - t, by head", *map(names.steps_to_target_name, names.STEP_TARGETS)
                    ),
                ),
            ),
            Section(
                "self-logit margin",
                (
                    by_head("line", "self-logit margin by head", names.SELF_LOGIT_MARGIN),
                    by_head("line", "token-table row norm (mean) by head", names.ROW_NORM_MEAN),
                    by_head("line", "token-table row norm (std) by head", names.ROW_NORM_STD),
                    by_head("line", "effective rank of the token table by head", names.EFFECTIVE_RANK),
                ),
            ),
            Section(
                "gradient norms",
                tuple(
                    by_head("line", f"gradient norm: {part}", name)
                    for part, name in [
                        ("total", names.GRAD_NORM_TOTAL),
                        *((part, names.grad_norm_name(part)) for part in names.GRAD_NORM_PARTS),
                    ]
                ),
            ),
        ),
    )


def width_view() -> View:
    return View(
        "tiedemb: embedding width",
        (
            Section(
                "loss against d_e",
                (
                    against_d_e("final validation loss against d_e", names.VAL_LOSS),
                    Panel("line", "validation loss by d_e", (names.VAL_LOSS,), groupby=D_E_KEY),
                ),
            ),
            Section(
                "dev score against d_e", tuple(against_d_e(f"{metric} against d_e", metric) for metric in dev_scores())
            ),
            Section(
                "token table against d_e",
                (against_d_e("effective rank of the token table against d_e", names.EFFECTIVE_RANK),),
            ),
        ),
    )


def views() -> list[View]:
    return [tied_view(), width_view()]


def as_json(found: list[View]) -> dict[str, Any]:
    """The views as plain data: what ``--dry-run`` prints."""
    return {"views": [asdict(view) for view in found]}


# -- wandb-workspaces --------------------------------------------------------------------------------
def _workspaces_package() -> tuple[Any, Any]:
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    except ImportError:
        raise UserError(
            f"the dashboard needs wandb-workspaces: pip install 'tiedemb[{EXTRA}]' (or pip install wandb-workspaces)"
        ) from None
    return ws, wr


def workspace_panel(panel: Panel, wr: Any) -> Any:
    """A ``wandb_workspaces`` panel drawing ``panel``; groups as mean with a standard-deviation band."""
    grouping = (
        {"groupby": panel.groupby, "groupby_aggfunc": "mean", "groupby_rangefunc": "stddev"} if panel.groupby else {}
    )
    if panel.kind == "line":
        return wr.LinePlot(title=panel.title, x=STEP, y=list(panel.metrics), **grouping)
    if panel.kind == "bar":
        return wr.BarPlot(title=panel.title, metrics=list(panel.metrics), orientation="v", **grouping)
    x = wr.Config(panel.x) if panel.x_config else wr.SummaryMetric(panel.x)
    return wr.ScatterPlot(title=panel.title, x=x, y=wr.SummaryMetric(panel.metrics[0]))


def build_workspaces(found: list[View], entity: str, project: str) -> list[Any]:
    """Every view as a ``wandb_workspaces`` Workspace, built whole before any is saved."""
    ws, wr = _workspaces_package()
    return [
        ws.Workspace(
            entity=entity,
            project=project,
            name=view.name,
            sections=[
                ws.Section(
                    name=section.name, panels=[workspace_panel(panel, wr) for panel in section.panels], is_open=True
                )
                for section in view.sections
            ],
        )
        for view in found
    ]
