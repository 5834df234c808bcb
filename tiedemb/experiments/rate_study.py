"""A study with each variant at its own learning rate: the rate a fixed rule picks, then the claims.

Its input is what ``tiedemb report`` writes for each folder of runs (``run_metrics.csv``), read back
with the phase the protocol gives it: ``tuning`` runs (a grid of rates on tuning seeds and one corpus
split) or ``verdict`` runs (every variant at its tuned rate, seeds and corpus splits of their own).

The rule (``pick_rates``): a rate at which any tuning seed of a variant diverged (a non-finite loss,
or a final loss above the run's unigram loss) is not eligible; among the rest the lowest mean final
loss wins. A pick at an edge of the grid is flagged: the protocol then extends the grid. Each claim is
decided at every rate both its variants share in the tuning runs, and on the verdict runs, raw and
Holm-adjusted over all claims.

Files written to the output folder: ``run_metrics.csv`` (every run read, with the protocol version
that governed it), ``tuning.csv`` (the rule's table), ``claims_by_rate.csv``, ``claims.csv``,
``claims_vs_rate.png`` and ``report.md``; the verdicts and tables as the sweep report's
(``claims.decide``, ``report_writer``).
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tiedemb.errors import UserError
from tiedemb.experiments import plots
from tiedemb.experiments.aggregate import Table
from tiedemb.experiments.cells import git
from tiedemb.experiments.claims import (
    FAILS,
    HOLDS,
    HOLDS_SMALL,
    Analysis,
    Claim,
    Difference,
    claim_difference,
    comparisons,
    decide,
    parse_analysis,
)
from tiedemb.experiments.report_writer import flat_rows, markdown_table, write_rows

STUDY = "clm"
RATE_COLUMN = "learning_rate"


@dataclass(frozen=True)
class RunRow:
    """One run of the study, as its report's ``run_metrics.csv`` row gives it."""

    phase: str
    variant: str
    rate: float
    seed: str
    corpus_seed: str
    final: float  # nan when the run has none
    unigram: float
    last_step: float
    steps: dict[float, float | None]  # target -> steps to unigram - target (None: never reached)
    commit: str
    started: str
    source: str  # the table it came from

    @property
    def diverged(self) -> bool:
        return not math.isfinite(self.final) or (math.isfinite(self.unigram) and self.final > self.unigram)


def _number(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except ValueError:
        return math.nan


def read_runs(path: Path, phase: str, rate: float | None = None) -> list[RunRow]:
    """The finished runs of one ``run_metrics.csv``; ``rate`` for a table without a rate column."""
    if not path.is_file():
        raise UserError(f"{path}: no such run table (tiedemb report writes run_metrics.csv)")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    found = []
    for row in rows:
        if row.get("study", STUDY) != STUDY or row.get("state") != "finished":
            continue
        if row.get(RATE_COLUMN, "") == "" and rate is None:
            raise UserError(f"{path}: no {RATE_COLUMN} column; give the table's rate (TABLE=RATE)")
        steps = {
            float(name.rsplit("-", 1)[1]): (None if value == "" else float(value))
            for name, value in row.items()
            if name.startswith("steps to unigram - ")
        }
        found.append(
            RunRow(
                phase=phase,
                variant=row["variant"],
                rate=float(row[RATE_COLUMN]) if row.get(RATE_COLUMN, "") != "" else rate,
                seed=str(row.get("seed_everything") or row.get("seed")),
                corpus_seed=str(row.get("corpus seed", "")),
                final=_number(row.get("final val loss")),
                unigram=_number(row.get("unigram")),
                last_step=_number(row.get("last step")),
                steps=steps,
                commit=row.get("commit") or "",
                started=row.get("started") or "",
                source=str(path),
            )
        )
    return found


# --------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class RateScore:
    variant: str
    rate: float
    n: int
    mean_final: float
    diverged: int  # tuning seeds that diverged at this rate
    seeds: int = 0  # the tuning seeds every rate must have run (the most any variant and rate has)

    @property
    def complete(self) -> bool:
        return self.n >= self.seeds

    @property
    def eligible(self) -> bool:
        return self.n > 0 and self.diverged == 0 and self.complete


def rate_scores(runs: Iterable[RunRow]) -> list[RateScore]:
    """Per variant and rate of the tuning runs: seeds, mean final loss, diverged seeds."""
    grouped: dict[tuple[str, float], list[RunRow]] = {}
    for run in runs:
        if run.phase == "tuning":
            grouped.setdefault((run.variant, run.rate), []).append(run)
    seeds = max((len(group) for group in grouped.values()), default=0)
    scores = []
    for (variant, rate), group in sorted(grouped.items()):
        finite = [run.final for run in group if not run.diverged]
        mean = sum(finite) / len(finite) if len(finite) == len(group) else math.nan
        scores.append(RateScore(variant, rate, len(group), mean, sum(run.diverged for run in group), seeds))
    return scores


@dataclass(frozen=True)
class Pick:
    variant: str
    rate: float | None  # None: no eligible rate
    at_edge: str  # "", "lowest" or "highest": the grid must be extended there
    grid: tuple[float, ...]
    missing: tuple[float, ...] = ()  # grid rates of this variant not (completely) run: the pick is provisional


def pick_rates(runs: Iterable[RunRow], grid: Sequence[float] = ()) -> dict[str, Pick]:
    """Each variant's eligible tuning rate with the lowest mean final loss; ``grid``: the protocol's
    rates, so that a variant with one not run on every tuning seed has a provisional pick."""
    scores = rate_scores(runs)
    grid = tuple(sorted({score.rate for score in scores} | set(grid)))
    picks = {}
    for variant in sorted({score.variant for score in scores}):
        mine = [score for score in scores if score.variant == variant]
        complete = {score.rate for score in mine if score.complete}
        missing = tuple(rate for rate in grid if rate not in complete)
        eligible = [score for score in mine if score.eligible]
        if not eligible:
            picks[variant] = Pick(variant, None, "", grid, missing)
            continue
        best = min(eligible, key=lambda score: (score.mean_final, score.rate))
        edge = "lowest" if best.rate == grid[0] else "highest" if best.rate == grid[-1] else ""
        picks[variant] = Pick(variant, best.rate, edge, grid, missing)
    return picks


# --------------------------------------------------------------------------- claims


def compare(level: Sequence[RunRow], reference: Sequence[RunRow], claim: Claim) -> Difference:
    """``level - reference`` paired by seed, for one claim's metric."""
    mine, theirs = ({run.seed: run for run in runs} for runs in (level, reference))
    return claim_difference(mine, theirs, claim.metric, claim.target)


def claims_at_rates(runs: Sequence[RunRow], analysis: Analysis) -> list[dict[str, Any]]:
    """Each claim at each rate both of its variants ran in the tuning phase."""
    tuning = [run for run in runs if run.phase == "tuning"]
    compared, rates = [], []
    for claim, level, reference in comparisons(analysis):
        shared = {r.rate for r in tuning if r.variant == level} & {r.rate for r in tuning if r.variant == reference}
        for rate in sorted(shared):
            mine = [run for run in tuning if run.variant == level and run.rate == rate]
            theirs = [run for run in tuning if run.variant == reference and run.rate == rate]
            compared.append((claim, level, reference, compare(mine, theirs, claim)))
            rates.append((rate, any(run.diverged for run in mine + theirs)))
    rows = decide(compared)
    for row, (rate, diverged) in zip(rows, rates):
        row["learning rate"] = rate
        row["diverged"] = "yes" if diverged else ""
        if diverged:
            row["verdict"] = "a variant diverged"
    return rows


def tuned_claims(
    runs: Sequence[RunRow], analysis: Analysis, picks: Mapping[str, Pick], at_rates: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each claim on the verdict runs (every variant at its tuned rate), raw and after Holm."""
    verdict_runs = [run for run in runs if run.phase == "verdict"]
    compared, rates = [], []
    for claim, level, reference in comparisons(analysis):
        level_rate, reference_rate = (picks[v].rate if v in picks else None for v in (level, reference))
        mine = [run for run in verdict_runs if run.variant == level and run.rate == level_rate]
        theirs = [run for run in verdict_runs if run.variant == reference and run.rate == reference_rate]
        compared.append((claim, level, reference, compare(mine, theirs, claim)))
        rates.append((level_rate, reference_rate))
    rows = decide(compared)
    for row, (level_rate, reference_rate) in zip(rows, rates):
        row["level rate"], row["reference rate"] = level_rate, reference_rate
        if not row["n"]:
            row["verdict"] = row["Holm verdict"] = "no verdict runs"
        shared = [r for r in at_rates if r["claim"] == row["claim"] and r["level"] == row["level"]]
        row["across rates"] = robustness(row["verdict"], [r["verdict"] for r in shared if not r["diverged"]])
    return rows


def robustness(tuned: str, at_rates: Sequence[str]) -> str:
    """ "holds robustly" only where the claim holds at the tuned rates and at every shared rate."""
    held = (HOLDS, HOLDS_SMALL)
    if tuned not in held:
        return "—"
    if not at_rates:
        return "holds at the tuned rates; no shared rate to check"
    if all(found in held for found in at_rates):
        return "holds robustly"
    failed = sum(found == FAILS for found in at_rates)
    open_ = sum(found not in held and found != FAILS for found in at_rates)
    parts = [f"does not hold at {failed} shared rate(s)"] if failed else []
    parts += [f"undecided at {open_}"] if open_ else []
    return "holds at the tuned rates only (" + ", ".join(parts) + ")"


# --------------------------------------------------------------------------- the report


def read_claims(path: Path) -> Analysis:
    """The claims file: a sweep file's ``analysis`` section (experiments/claims.py) on its own."""
    if not path.is_file():
        raise UserError(f"{path}: no such claims file")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    analysis = parse_analysis(raw.get("analysis"), [STUDY], str(path))
    if analysis is None or not analysis.claims:
        raise UserError(f"{path}: no analysis section with claims")
    return analysis


def _protocol_note(protocol: Path, commits: list[str], commit: str) -> str:
    """Whether the protocol's current version governed a run made at ``commit`` (its newest commit
    that is an ancestor of it); empty when it did."""
    if not commit:
        return "commit not recorded"
    if not commits:
        return "no git history to check"
    governed = (git(["log", "-1", "--format=%H", commit, "--", protocol.name], protocol.parent) or "").strip()
    if not governed:
        return "before the protocol (named in it as a tuning run)"
    return f"made under protocol version {governed[:7]}, not the current one" if governed != commits[0] else ""


def provenance(runs: Sequence[RunRow], protocol: Path, commits: list[str]) -> list[dict[str, Any]]:
    """Each run's row with the protocol version that governed it."""
    return [
        {
            "phase": run.phase,
            "variant": run.variant,
            "learning rate": run.rate,
            "seed": run.seed,
            "corpus seed": run.corpus_seed,
            "final val loss": None if math.isnan(run.final) else run.final,
            "unigram": run.unigram,
            "steps to unigram - 1": run.steps.get(1.0),
            "last step": run.last_step,
            "diverged": "yes" if run.diverged else "",
            "commit": run.commit,
            "started": run.started,
            "protocol": _protocol_note(protocol, commits, run.commit),
            "source": run.source,
        }
        for run in runs
    ]


def figure(at_rates: Sequence[dict[str, Any]], tuned: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """One panel per claim: the paired difference with its interval against the learning rate,
    the margin dashed, and the verdict runs' difference (red square) beside its tuned rate."""
    plt = plots.pyplot()
    if plt is None or not at_rates:
        return None

    def error_bars(differences: Sequence[Difference]) -> list[list[float]]:
        return [
            [d.mean - d.low if math.isfinite(d.low) else 0 for d in differences],
            [d.high - d.mean if math.isfinite(d.high) else 0 for d in differences],
        ]

    keys = list(dict.fromkeys((row["claim"], row["level"]) for row in at_rates))
    rows_n = math.ceil(len(keys) / 3)
    fig, axes = plt.subplots(rows_n, 3, figsize=(12.6, 3.2 * rows_n), squeeze=False)
    for ax, (claim, level) in zip(axes.flat, keys):
        points = [row for row in at_rates if row["claim"] == claim and row["level"] == level]
        differences = [row["Δ"] for row in points]
        rates = [row["learning rate"] for row in points]
        means = [d.mean for d in differences]
        ax.errorbar(rates, means, yerr=error_bars(differences), fmt="o-", capsize=3, label="shared rate (tuning runs)")
        mine = next(row for row in tuned if row["claim"] == claim and row["level"] == level)
        if mine["n"] and mine["level rate"] and math.isfinite(mine["Δ"].low):
            # the verdict runs' difference, drawn just right of its rate so the two do not overlap
            ax.errorbar(
                [mine["level rate"] * 1.15],
                [mine["Δ"].mean],
                yerr=error_bars([mine["Δ"]]),
                fmt="s",
                color="tab:red",
                capsize=3,
                label=f"tuned rate, verdict runs (n = {mine['n']})",
            )
            ax.legend(fontsize=7)
        ax.axhline(0, color="grey", linewidth=0.8)
        for sign in (1, -1):
            ax.axhline(sign * float(mine["margin"]), color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_title(f"{level} − {points[0]['reference']}", fontsize=9)
        ax.set_ylabel(f"Δ {points[0]['measure']}")
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.tight_layout()
    return plots.save(fig, path)


BY_RATE_COLUMNS = ["claim", "level", "reference", "learning rate", "diverged", "n", "difference", "verdict"]
CLAIM_COLUMNS = [
    "claim",
    "level",
    "reference",
    "measure",
    "expected",
    "margin",
    "level rate",
    "reference rate",
    "n",
    "difference",
    "verdict",
    "p",
    "Holm p",
    "Holm verdict",
    "across rates",
]


def _score_rows(scores: Sequence[RateScore], picks: dict[str, Pick]) -> list[dict[str, Any]]:
    """The rule's table (``tuning.csv``): each variant and rate, whether eligible and whether picked."""
    return [
        {
            "variant": s.variant,
            "learning rate": s.rate,
            "tuning seeds": s.n,
            "mean final val loss": None if math.isnan(s.mean_final) else s.mean_final,
            "diverged seeds": s.diverged,
            "eligible": "yes" if s.eligible else "no" if s.complete else f"no: {s.n} of {s.seeds} seeds",
            "picked": "yes" if picks[s.variant].rate == s.rate else "",
        }
        for s in scores
    ]


def _pick_lines(picks: dict[str, Pick]) -> list[str]:
    lines = []
    for variant, pick in sorted(picks.items()):
        rate = "none eligible" if pick.rate is None else f"{pick.rate:g}"
        edge = f" — at the grid's {pick.at_edge} rate: the protocol extends the grid" if pick.at_edge else ""
        missing = ", ".join(f"{r:g}" for r in pick.missing)
        wait = f" — provisional: {missing} not yet run on every tuning seed" if pick.missing else ""
        lines.append(f"{variant}: {rate}{edge}{wait}")
    return lines


def write_rate_report(
    tuning: Sequence[RunRow],
    verdict_runs: Sequence[RunRow],
    claims: Path,
    protocol: Path,
    out: Path,
    grid: Sequence[float] = (),
) -> Path:
    analysis = read_claims(claims)
    # the study's variants are those its claims compare (a fixed-rate table may hold others)
    variants = {name for claim, level, reference in comparisons(analysis) for name in (level, reference)}
    runs = [run for run in [*tuning, *verdict_runs] if run.variant in variants]
    if not any(run.phase == "tuning" for run in runs):
        raise UserError("no finished tuning runs were read: nothing to pick a rate from")
    out.mkdir(parents=True, exist_ok=True)
    commits = (git(["log", "--format=%H", "--", protocol.name], protocol.parent) or "").split()
    picks = pick_rates(runs, grid)
    at_rates = claims_at_rates(runs, analysis)
    tuned = tuned_claims(runs, analysis, picks, at_rates)
    claims_note = f"{len(tuned)} claims tested on the verdict runs; Holm's adjustment over all of them (0.025)"
    run_metrics = Table("run_metrics", "Runs read", provenance(runs, protocol, commits))
    tables = [
        Table(
            "tuning",
            "The rule's picks",
            _score_rows(rate_scores(runs), picks),
            notes=[
                "each variant's eligible tuning rate with the lowest mean final validation loss "
                "(no tuning seed diverged)",
                *_pick_lines(picks),
            ],
        ),
        Table("claims", "Claims at the tuned rates", tuned, columns=CLAIM_COLUMNS, notes=[claims_note]),
        Table("claims_by_rate", "Claims at every shared rate (tuning runs)", at_rates, columns=BY_RATE_COLUMNS),
    ]
    for table in [run_metrics, *tables]:
        write_rows(*flat_rows(table), out / f"{table.name}.csv")
    plot = figure(at_rates, tuned, out / "claims_vs_rate.png")
    lines = _header(protocol, commits, run_metrics.rows)
    for table in tables:
        lines += [f"## {table.title}", "", markdown_table(table)]
    if plot is not None:
        lines += [f"![paired difference against the learning rate]({plot.name})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _header(protocol: Path, commits: list[str], run_rows: list[dict[str, Any]]) -> list[str]:
    version = f"at commit {commits[0][:7]} (first committed at {commits[-1][:7]})" if commits else "(no git history)"
    phases = Counter(row["phase"] for row in run_rows)
    marked = sum(bool(row["protocol"]) for row in run_rows)
    return [
        "# Each remedy at its own learning rate",
        "",
        f"Protocol: `{protocol.name}` {version}.",
        "",
        f"Runs read: {phases['tuning']} tuning, {phases['verdict']} verdict; {marked} marked in "
        "`run_metrics.csv` (column `protocol`) as made outside the current protocol version or without a "
        "recorded commit.",
        "",
    ]
