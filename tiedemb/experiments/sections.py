"""The report's section kinds: what a sweep file's ``report:`` list names, one entry per section.

A sweep file declares its report as a list of section kinds, in the order they appear, each a name
or a mapping of ``kind`` and that kind's options::

    report:
      - baselines
      - convergence
      - claims
      - {kind: embedding_dim, downstream: true}
      - runs_not_averaged

Evidence kinds (the tables of baselines, convergence, differences, claims, the width study's and the
zero-shot probes) are shown under one heading, each only where it has rows; chapter kinds
(``tied_embeddings``, ``embedding_dim``, ``runs_not_averaged``) get a
numbered heading of their own. Every report also writes ``runs.csv``, ``run_metrics.csv``,
``curves.csv`` and each run's resolved config, whatever it declares. A sweep file without
``report:`` (and a folder of plain runs) gets ``default_report``. The width kinds read the
``analysis`` block's ``common_target`` and reference (``tiedemb.experiments.width_study``), so a
sweep that names one must set them.
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
from tiedemb.experiments.aggregate import (
    Table,
    embedding_dim_table,
    tied_table,
)
from tiedemb.experiments.claims import Analysis
from tiedemb.experiments.runs import Run

EVIDENCE_HEADING = "## Evidence: baselines, convergence, paired differences and verdicts"
WIDTH_KINDS = ("width_control", "width_gains", "width_convergence_cost", "width_parameters", "gap_to_full_width")
OPTIONS: dict[str, tuple[str, ...]] = {"embedding_dim": ("downstream",)}
"""Each kind's options beside ``kind`` (a kind not listed takes none)."""
RETIRED = ("embedding_analysis",)
"""Kinds of earlier versions, passed over: a sweep file or ``sweep.json`` naming one still reports."""


@dataclass
class Part:
    """What one section adds: tables (each also a CSV), figures and Markdown.

    ``heading``: a chapter's title; ``None`` for an evidence section, shown under the shared heading.
    """

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
    target_loss: float | None = None
    echo: Callable[[str], None] = print

    @cached_property
    def numbers(self) -> dict[str, dict[str, dict[str, evidence.RunNumbers]]]:
        return evidence.collect(self.runs, self.analysis)

    def figure(self, name: str, caption: str, draw: Callable[[Path], Path | None]) -> tuple[str, Path | None]:
        return f"![{caption}]({name})", draw(self.root / name)


# --------------------------------------------------------------------------- evidence kinds


def _table(build: Callable[[Inputs], Table]) -> Callable[[Inputs], Part]:
    return lambda inputs: Part(tables=[build(inputs)])


def _width(build: Callable[[Any, Analysis], Table]) -> Callable[[Inputs], Part]:
    def section(inputs: Inputs) -> Part:
        if inputs.analysis is None or inputs.analysis.common_target is None:
            return Part()  # the claims could not be read (said so already): nothing to measure against
        return Part(tables=[build(inputs.numbers, inputs.analysis)])

    return section


def gap_to_full_width(inputs: Inputs) -> Part:
    if inputs.analysis is None or inputs.analysis.common_target is None:
        return Part()
    curves = width_study.gap_curves(inputs.numbers, inputs.analysis)
    caption = "Each width's validation loss minus the full width's against steps; band: the seeds' range"
    return Part(
        figures=[
            inputs.figure(
                "gap_to_full_width.png",
                caption,
                lambda path: plots.gap_to_full_width(curves, inputs.analysis.reference, path),
            )
        ]
    )


# --------------------------------------------------------------------------- chapter kinds


def tied_embeddings(inputs: Inputs) -> Part:
    claims = inputs.analysis
    table = tied_table(inputs.runs, inputs.target_loss, default_target=not (claims and claims.targets))
    caption = "Validation loss per variant; circles: measured initial loss, crosses: predicted, dashed: ln n"
    return Part(
        heading="Tied embeddings",
        tables=[table],
        figures=[inputs.figure("loss_curves.png", caption, lambda path: plots.loss_curves(inputs.runs, path))],
    )


def embedding_dim(inputs: Inputs, downstream: bool = False) -> Part:
    """The width table; ``downstream``: notes on whether a fine-tuned score clears the majority class
    by more than its minimum detectable effect (``width_study.downstream_notes``)."""
    dims = embedding_dim_table(inputs.runs)
    if downstream:
        dims.notes += width_study.downstream_notes(dims)
    caption = "Dev score and total parameters against d_e"
    return Part(
        heading="Embedding dimension",
        tables=[dims],
        figures=[
            inputs.figure(
                "dev_score_vs_de.png", caption, lambda path: plots.dev_score_vs_dim(dims.rows, dims.score_columns, path)
            )
        ],
    )


def runs_not_averaged(inputs: Inputs) -> Part:
    not_averaged = [run for run in inputs.runs if not run.ok]
    if not not_averaged:
        return Part(heading="Runs not averaged", lines=["None: every run finished.", ""])
    rows = [
        f"| {run.id} | {run.state} | {(run.message.splitlines() or [''])[-1][:200].replace('|', '/')} |"
        for run in not_averaged
    ]
    return Part(
        heading="Runs not averaged",
        lines=[
            "These runs failed or did not finish; no table above includes them.",
            "",
            "| run | state | last message |",
            "|---|---|---|",
            *rows,
            "",
        ],
    )


SECTIONS: dict[str, Callable[..., Part]] = {
    "baselines": _table(lambda inputs: evidence.baselines_table(inputs.numbers)),
    "convergence": _table(lambda inputs: evidence.convergence_table(inputs.numbers, inputs.analysis)),
    "paired_differences": _table(lambda inputs: evidence.differences_table(inputs.numbers, inputs.analysis)),
    "claims": _table(lambda inputs: evidence.claims_table(inputs.numbers, inputs.analysis)),
    "width_control": _width(width_study.control_table),
    "width_gains": _width(width_study.gain_table),
    "width_convergence_cost": _width(width_study.convergence_cost_table),
    "width_parameters": _width(width_study.parameters_table),
    "zero_shot": _table(lambda inputs: evidence.zero_shot_table(inputs.runs)),
    "gap_to_full_width": gap_to_full_width,
    "tied_embeddings": tied_embeddings,
    "embedding_dim": embedding_dim,
    "runs_not_averaged": runs_not_averaged,
}
DEFAULT_REPORT = (
    "baselines",
    "convergence",
    "paired_differences",
    "claims",
    "zero_shot",
    "tied_embeddings",
    "embedding_dim",
    "runs_not_averaged",
)
"""The report of runs whose sweep declares none: every kind that needs no width analysis."""


def default_report() -> list[dict[str, Any]]:
    return [{"kind": section} for section in DEFAULT_REPORT]


def parse_report(raw: Any, analysis: Analysis | None, where: str) -> list[dict[str, Any]] | None:
    """A sweep file's ``report:`` list as ``[{kind: ..., option: value}]``; ``None`` when it has none.

    Raises ``UserError`` naming the entry: an unknown kind (with the list of kinds), an unknown option,
    or a width kind in a sweep whose analysis sets no ``common_target``.
    """
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
        kind = section["kind"]
        if kind in RETIRED:
            continue
        if kind not in SECTIONS:
            nearest = difflib.get_close_matches(kind, SECTIONS, n=1)
            hint = f"did you mean {nearest[0]}? " if nearest else ""
            raise UserError(f"{here}: unknown section kind {kind!r}; {hint}the kinds are {', '.join(SECTIONS)}")
        unknown = sorted(set(section) - {"kind", *OPTIONS.get(kind, ())})
        if unknown:
            allowed = ", ".join(OPTIONS.get(kind, ())) or "none"
            raise UserError(f"{here}: {kind} has no option {unknown[0]!r} (its options: {allowed})")
        for option in set(section) - {"kind"}:  # every option is a switch
            if not isinstance(section[option], bool):
                raise UserError(f"{here}: {kind}'s {option} must be true or false, got {section[option]!r}")
        if kind in WIDTH_KINDS and (analysis is None or analysis.common_target is None):
            raise UserError(f"{here}: {kind} compares widths at analysis.common_target, which the file does not set")
        sections.append(dict(section))
    return sections


def build_parts(sections: list[dict[str, Any]], inputs: Inputs) -> list[Part]:
    parts = []
    for section in sections:
        options = {key: value for key, value in section.items() if key != "kind"}
        parts.append(SECTIONS[section["kind"]](inputs, **options))
    return parts
