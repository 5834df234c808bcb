"""The report's section kinds: what a sweep file's ``report:`` list names, one entry per section.

A sweep file declares its report as a list of section kinds, in the order they appear (each a name,
or ``{kind: name}`` as ``sweep.json`` records it).
Evidence kinds are shown under one heading, each only where it has rows; chapter kinds get a
numbered heading of their own. A sweep file without ``report:`` (and a folder of plain runs) gets
``default_report``: every kind that does not compare widths at ``analysis.common_target``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.experiments import evidence, plots, width_study
from tiedemb.experiments.aggregate import Table, embedding_dim_table
from tiedemb.experiments.claims import Analysis
from tiedemb.experiments.runs import Run

EVIDENCE_HEADING = "## Evidence: baselines, convergence, paired differences and verdicts"


@dataclass
class Part:
    """What one section adds: tables (each also a CSV) and figures; ``heading``: a chapter's title,
    ``None`` for an evidence section."""

    heading: str | None = None
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, Path | None]] = field(default_factory=list)  # (Markdown image, written file or None)


@dataclass
class Inputs:
    """What every section reads: the folder, its runs and the sweep's claims."""

    root: Path
    runs: list[Run]
    analysis: Analysis | None

    @cached_property
    def numbers(self) -> dict[str, dict[str, dict[str, evidence.RunNumbers]]]:
        return evidence.collect(self.runs, self.analysis)

    def figure(self, name: str, caption: str, draw: Callable[..., Path | None], *args: Any) -> tuple[str, Path | None]:
        """``draw(*args, path)`` into ``name`` beside the report, and its Markdown image."""
        return f"![{caption}]({name})", draw(*args, self.root / name)


def _evidence(build: Callable[[Inputs], Table]) -> Callable[[Inputs], Part]:
    return lambda inputs: Part(tables=[build(inputs)])


def _width(build: Callable[[Any, Analysis], Table]) -> Callable[[Inputs], Part]:
    return lambda inputs: Part(tables=[build(inputs.numbers, inputs.analysis)])


def gap_to_full_width(inputs: Inputs) -> Part:
    curves = width_study.gap_curves(inputs.numbers, inputs.analysis)
    caption = "Each width's validation loss minus the full width's against steps; band: the seeds' range"
    draw = plots.gap_to_full_width
    return Part(figures=[inputs.figure("gap_to_full_width.png", caption, draw, curves, inputs.analysis.reference)])


def convergence(inputs: Inputs) -> Part:
    caption = "Validation loss per variant; circles: measured initial loss, crosses: predicted, dashed: ln n"
    return Part(
        tables=[evidence.convergence_table(inputs.numbers, inputs.analysis)],
        figures=[inputs.figure("loss_curves.png", caption, plots.loss_curves, inputs.runs)],
    )


def embedding_dim(inputs: Inputs) -> Part:
    dims = embedding_dim_table(inputs.runs)
    caption = "Dev score against d_e"
    figure = inputs.figure("dev_score_vs_de.png", caption, plots.dev_score_vs_dim, dims.rows, dims.score_columns)
    return Part(heading="Embedding dimension", tables=[dims], figures=[figure])


def runs_not_averaged(inputs: Inputs) -> Part:
    rows = [
        {"run": run.id, "state": run.state, "last message": (run.message.splitlines() or [""])[-1][:200]}
        for run in inputs.runs
        if not run.ok
    ]
    notes = ["these runs failed or did not finish; no other table includes them"]
    return Part(
        heading="Runs not averaged", tables=[Table("runs_not_averaged", "Runs not averaged", rows, notes=notes)]
    )


SECTIONS: dict[str, Callable[[Inputs], Part]] = {
    "baselines": _evidence(lambda inputs: evidence.baselines_table(inputs.numbers)),
    "convergence": convergence,
    "paired_differences": _evidence(lambda inputs: evidence.differences_table(inputs.numbers, inputs.analysis)),
    "claims": _evidence(lambda inputs: evidence.claims_table(inputs.numbers, inputs.analysis)),
    "width_control": _width(width_study.control_table),
    "width_gains": _width(width_study.gain_table),
    "width_convergence_cost": _width(width_study.convergence_cost_table),
    "width_parameters": _width(width_study.parameters_table),
    "zero_shot": _evidence(lambda inputs: evidence.zero_shot_table(inputs.runs)),
    "gap_to_full_width": gap_to_full_width,
    "embedding_dim": embedding_dim,
    "runs_not_averaged": runs_not_averaged,
}
WIDTH_KINDS = {"width_control", "width_gains", "width_convergence_cost", "width_parameters", "gap_to_full_width"}
"""The kinds that compare widths at ``analysis.common_target`` (``width_study``): a sweep naming one must set it."""


def default_report() -> list[dict[str, Any]]:
    return [{"kind": name} for name in SECTIONS if name not in WIDTH_KINDS]


def parse_report(raw: Any, analysis: Analysis | None, where: str) -> list[dict[str, Any]] | None:
    """A sweep file's ``report:`` list as ``[{kind: ...}]``; ``None`` when it has none.
    Raises ``UserError`` naming the entry."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{where}: report must be a list of section kinds, e.g. [convergence, claims]")
    sections = []
    for index, entry in enumerate(raw):
        here = f"{where}: report[{index}]"
        name = entry.get("kind") if isinstance(entry, dict) and len(entry) == 1 else entry
        if not isinstance(name, str):
            raise UserError(f"{here}: expected a section kind, got {entry!r}")
        if name not in SECTIONS:
            nearest = difflib.get_close_matches(name, SECTIONS, n=1)
            hint = f"did you mean {nearest[0]}? " if nearest else ""
            raise UserError(f"{here}: unknown section kind {name!r}; {hint}the kinds are {', '.join(SECTIONS)}")
        if name in WIDTH_KINDS and (analysis is None or analysis.common_target is None):
            raise UserError(f"{here}: {name} compares widths at analysis.common_target, which the file does not set")
        sections.append({"kind": name})
    return sections


def build_parts(sections: list[dict[str, Any]], inputs: Inputs) -> list[Part]:
    return [SECTIONS[section["kind"]](inputs) for section in sections]
