"""The report's section kinds: what a sweep file's ``report:`` list names, one entry per section.

A sweep file declares its report as a list of section kinds, in the order they appear, each a name
or a mapping of ``kind`` and that kind's options (``{kind: embedding_dim, downstream: true}``).
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
from tiedemb.experiments.aggregate import Table, embedding_dim_table, tied_table
from tiedemb.experiments.claims import Analysis
from tiedemb.experiments.runs import Run

EVIDENCE_HEADING = "## Evidence: baselines, convergence, paired differences and verdicts"


@dataclass
class Part:
    """What one section adds: tables (each also a CSV), figures and Markdown; ``heading``: a chapter's
    title, ``None`` for an evidence section."""

    heading: str | None = None
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, Path | None]] = field(default_factory=list)  # (Markdown image, written file or None)
    lines: list[str] = field(default_factory=list)


@dataclass
class Inputs:
    """What every section reads: the runs, the sweep's claims, and the report command's options."""

    root: Path
    runs: list[Run]
    analysis: Analysis | None
    echo: Callable[[str], None] = print

    @cached_property
    def numbers(self) -> dict[str, dict[str, dict[str, evidence.RunNumbers]]]:
        return evidence.collect(self.runs, self.analysis)

    def figure(self, name: str, caption: str, draw: Callable[..., Path | None], *args: Any) -> tuple[str, Path | None]:
        """``draw(*args, path)`` into ``name`` beside the report, and its Markdown image."""
        return f"![{caption}]({name})", draw(*args, self.root / name)


@dataclass(frozen=True)
class Kind:
    """A section kind: how it is built, its options (each a switch), and whether it compares widths at
    ``analysis.common_target`` (``tiedemb.experiments.width_study``), which a sweep naming it must set."""

    build: Callable[..., Part]
    options: tuple[str, ...] = ()
    width: bool = False


def _evidence(build: Callable[[Inputs], Table]) -> Kind:
    return Kind(lambda inputs: Part(tables=[build(inputs)]))


def _width(build: Callable[[Any, Analysis], Table]) -> Kind:
    return Kind(lambda inputs: Part(tables=[build(inputs.numbers, inputs.analysis)]), width=True)


def gap_to_full_width(inputs: Inputs) -> Part:
    curves = width_study.gap_curves(inputs.numbers, inputs.analysis)
    caption = "Each width's validation loss minus the full width's against steps; band: the seeds' range"
    draw = plots.gap_to_full_width
    return Part(figures=[inputs.figure("gap_to_full_width.png", caption, draw, curves, inputs.analysis.reference)])


def tied_embeddings(inputs: Inputs) -> Part:
    table = tied_table(inputs.runs)
    caption = "Validation loss per variant; circles: measured initial loss, crosses: predicted, dashed: ln n"
    return Part(
        heading="Tied embeddings",
        tables=[table],
        figures=[inputs.figure("loss_curves.png", caption, plots.loss_curves, inputs.runs)],
    )


def embedding_dim(inputs: Inputs, downstream: bool = False) -> Part:
    """The width table; ``downstream``: whether a fine-tuned score clears the majority class by more than
    its minimum detectable effect (``width_study.downstream_notes``)."""
    dims = embedding_dim_table(inputs.runs)
    if downstream:
        dims.notes += width_study.downstream_notes(dims)
    caption = "Dev score and total parameters against d_e"
    figure = inputs.figure("dev_score_vs_de.png", caption, plots.dev_score_vs_dim, dims.rows, dims.score_columns)
    return Part(heading="Embedding dimension", tables=[dims], figures=[figure])


def runs_not_averaged(inputs: Inputs) -> Part:
    not_averaged = [run for run in inputs.runs if not run.ok]
    if not not_averaged:
        return Part(heading="Runs not averaged", lines=["None: every run finished.", ""])
    rows = [
        f"| {run.id} | {run.state} | {(run.message.splitlines() or [''])[-1][:200].replace('|', '/')} |"
        for run in not_averaged
    ]
    intro = ["These runs failed or did not finish; no table above includes them.", ""]
    return Part(
        heading="Runs not averaged", lines=[*intro, "| run | state | last message |", "|---|---|---|", *rows, ""]
    )


SECTIONS: dict[str, Kind] = {
    "baselines": _evidence(lambda inputs: evidence.baselines_table(inputs.numbers)),
    "convergence": _evidence(lambda inputs: evidence.convergence_table(inputs.numbers, inputs.analysis)),
    "paired_differences": _evidence(lambda inputs: evidence.differences_table(inputs.numbers, inputs.analysis)),
    "claims": _evidence(lambda inputs: evidence.claims_table(inputs.numbers, inputs.analysis)),
    "width_control": _width(width_study.control_table),
    "width_gains": _width(width_study.gain_table),
    "width_convergence_cost": _width(width_study.convergence_cost_table),
    "width_parameters": _width(width_study.parameters_table),
    "zero_shot": _evidence(lambda inputs: evidence.zero_shot_table(inputs.runs)),
    "gap_to_full_width": Kind(gap_to_full_width, width=True),
    "tied_embeddings": Kind(tied_embeddings),
    "embedding_dim": Kind(embedding_dim, options=("downstream",)),
    "runs_not_averaged": Kind(runs_not_averaged),
}


def default_report() -> list[dict[str, Any]]:
    return [{"kind": name} for name, kind in SECTIONS.items() if not kind.width]


def parse_report(raw: Any, analysis: Analysis | None, where: str) -> list[dict[str, Any]] | None:
    """A sweep file's ``report:`` list as ``[{kind: ..., option: value}]``; ``None`` when it has none.
    Raises ``UserError`` naming the entry."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{where}: report must be a list of section kinds, e.g. [claims, tied_embeddings]")
    sections = []
    for index, entry in enumerate(raw):
        here = f"{where}: report[{index}]"
        section = {"kind": entry} if isinstance(entry, str) else entry
        if not isinstance(section, dict) or not isinstance(section.get("kind"), str):
            raise UserError(f"{here}: expected a section kind or a mapping with a kind, got {entry!r}")
        name = section["kind"]
        if name not in SECTIONS:
            nearest = difflib.get_close_matches(name, SECTIONS, n=1)
            hint = f"did you mean {nearest[0]}? " if nearest else ""
            raise UserError(f"{here}: unknown section kind {name!r}; {hint}the kinds are {', '.join(SECTIONS)}")
        kind = SECTIONS[name]
        unknown = sorted(set(section) - {"kind", *kind.options})
        if unknown:
            raise UserError(
                f"{here}: {name} has no option {unknown[0]!r} (its options: {', '.join(kind.options) or 'none'})"
            )
        for option in kind.options:
            if not isinstance(section.get(option, False), bool):
                raise UserError(f"{here}: {name}'s {option} must be true or false, got {section[option]!r}")
        if kind.width and (analysis is None or analysis.common_target is None):
            raise UserError(f"{here}: {name} compares widths at analysis.common_target, which the file does not set")
        sections.append(dict(section))
    return sections


def build_parts(sections: list[dict[str, Any]], inputs: Inputs) -> list[Part]:
    return [
        SECTIONS[section["kind"]].build(inputs, **{key: value for key, value in section.items() if key != "kind"})
        for section in sections
    ]
