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
``claims_vs_rate.png`` and ``report.md``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tiedemb.errors import UserError
from tiedemb.experiments import plots
from tiedemb.experiments.cells import git
from tiedemb.experiments.claims import (
    FAILS,
    HOLDS,
    HOLDS_SMALL,
    UNDECIDED,
    Analysis,
    Claim,
    Difference,
    Measured,
    claim_difference,
    claim_p_value,
    comparisons,
    decision_gap,
    holm,
    holm_verdict,
    measured,
    parse_analysis,
    seeds_needed,
    verdict,
)
from tiedemb.experiments.report_writer import write_rows

PHASES = ("tuning", "verdict")
STUDY = "clm"
RATE_COLUMN = "learning_rate"
AT_RATE = "at lr "  # claims.csv's columns of each claim at one shared rate: "at lr 0.003"


@dataclass(frozen=True)
class RunRow:
    """One run of the study, as its report's ``run_metrics.csv`` row gives it."""

    phase: str
    variant: str
    rate: float
    seed: str
    corpus_seed: str
    state: str
    final_loss: float  # nan when the run has none
    unigram: float
    last_step: float
    steps: dict[float, float | None]  # target -> steps to unigram - target (None: never reached)
    commit: str
    started: str
    source: str  # the table it came from

    @property
    def diverged(self) -> bool:
        return not math.isfinite(self.final_loss) or (math.isfinite(self.unigram) and self.final_loss > self.unigram)


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
                state=row["state"],
                final_loss=_number(row.get("final val loss")),
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
        finite = [run.final_loss for run in group if not run.diverged]
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

    @property
    def provisional(self) -> bool:
        return bool(self.missing)


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

    def values(runs: Sequence[RunRow]) -> dict[str, Measured]:
        found = {
            run.seed: measured(run.final_loss, run.steps, run.last_step, claim.metric, claim.target) for run in runs
        }
        return {seed: value for seed, value in found.items() if value is not None}

    return claim_difference(values(level), values(reference))


def claims_at_rates(runs: Sequence[RunRow], analysis: Analysis) -> list[dict[str, Any]]:
    """Each claim at each rate both of its variants ran in the tuning phase."""
    tuning = [run for run in runs if run.phase == "tuning"]
    rows = []
    for claim, level, reference in comparisons(analysis):
        rates = sorted(
            {r.rate for r in tuning if r.variant == level} & {r.rate for r in tuning if r.variant == reference}
        )
        for rate in rates:
            mine = [run for run in tuning if run.variant == level and run.rate == rate]
            theirs = [run for run in tuning if run.variant == reference and run.rate == rate]
            diverged = any(run.diverged for run in mine + theirs)
            difference = compare(mine, theirs, claim)
            rows.append(
                {
                    "claim": claim.text,
                    "level": level,
                    "reference": reference,
                    "learning rate": rate,
                    "diverged": "yes" if diverged else "",
                    "n": difference.n,
                    "mean": difference.mean,
                    "low": difference.low,
                    "high": difference.high,
                    "difference": difference.format(0 if claim.metric == "steps" else 3),
                    "verdict": "a variant diverged" if diverged else verdict(difference, claim.expect, claim.margin),
                }
            )
    return rows


def tuned_claims(
    runs: Sequence[RunRow], analysis: Analysis, picks: Mapping[str, Pick], at_rates: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each claim on the verdict runs (every variant at its tuned rate), raw and after Holm."""
    verdict_runs = [run for run in runs if run.phase == "verdict"]
    rows = []
    for claim, level, reference in comparisons(analysis):
        level_rate, reference_rate = (picks[v].rate if v in picks else None for v in (level, reference))
        mine = [run for run in verdict_runs if run.variant == level and run.rate == level_rate]
        theirs = [run for run in verdict_runs if run.variant == reference and run.rate == reference_rate]
        difference = compare(mine, theirs, claim)
        raw = verdict(difference, claim.expect, claim.margin) if difference.n else "no verdict runs"
        # The n at which the measured spread would tell the measured mean apart from the nearest
        # line of the rule (a mean on the margin: more than any budget, left empty).
        gap = decision_gap(difference, claim.expect, claim.margin)
        needed = (seeds_needed(difference.sd, gap) or "more than 1000") if raw == UNDECIDED else None
        rows.append(
            {
                "claim": claim.text,
                "level": level,
                "reference": reference,
                "measure": claim.metric_name,
                "expected": claim.expect,
                "margin": claim.margin,
                "level rate": level_rate,
                "reference rate": reference_rate,
                "n": difference.n,
                "mean": difference.mean,
                "low": difference.low,
                "high": difference.high,
                "difference": difference.format(0 if claim.metric == "steps" else 3),
                "verdict": raw,
                "p": claim_p_value(difference, claim.expect, claim.margin),
                "seeds needed": needed,
            }
        )
    for row, adjusted in zip(rows, holm([row["p"] for row in rows])):
        row["Holm p"] = adjusted
        row["Holm verdict"] = holm_verdict(row["verdict"], adjusted)
        shared = [r for r in at_rates if r["claim"] == row["claim"] and r["level"] == row["level"]]
        row["across rates"] = robustness(row["verdict"], [r["verdict"] for r in shared if not r["diverged"]])
        for r in shared:  # the claim at each shared rate, beside its tuned-rate verdict
            row[f"{AT_RATE}{r['learning rate']:g}"] = f"{r['difference']}: {r['verdict']}"
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


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


def _write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    write_rows(list(columns), [[_cell(row.get(key)) for key in columns] for row in rows], path)


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
            "final val loss": run.final_loss,
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
    keys = list(dict.fromkeys((row["claim"], row["level"]) for row in at_rates))
    columns = 3
    rows_n = math.ceil(len(keys) / columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(4.2 * columns, 3.2 * rows_n), squeeze=False)
    for ax, (claim, level) in zip(axes.flat, keys):
        points = [row for row in at_rates if row["claim"] == claim and row["level"] == level]
        rates = [row["learning rate"] for row in points]
        means = [row["mean"] for row in points]
        lows = [row["mean"] - row["low"] if math.isfinite(row["low"]) else 0 for row in points]
        highs = [row["high"] - row["mean"] if math.isfinite(row["high"]) else 0 for row in points]
        ax.errorbar(rates, means, yerr=[lows, highs], fmt="o-", capsize=3, label="shared rate (tuning runs)")
        mine = next((row for row in tuned if row["claim"] == claim and row["level"] == level), None)
        margin = mine["margin"] if mine is not None else None
        if mine is not None and mine["n"] and mine["level rate"] and math.isfinite(mine["low"]):
            # the verdict runs' difference, drawn just right of its rate so the two do not overlap
            ax.errorbar(
                [mine["level rate"] * 1.15],
                [mine["mean"]],
                yerr=[[mine["mean"] - mine["low"]], [mine["high"] - mine["mean"]]],
                fmt="s",
                color="tab:red",
                capsize=3,
                label=f"tuned rate, verdict runs (n = {mine['n']})",
            )
            ax.legend(fontsize=7)
        ax.axhline(0, color="grey", linewidth=0.8)
        if margin is not None:
            for sign in (1, -1):
                ax.axhline(sign * margin, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        reference = points[0]["reference"]
        ax.set_title(f"{level} − {reference}", fontsize=9)
        ax.set_ylabel("Δ steps" if "steps" in claim or "converges" in claim else "Δ final loss")
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
    "seeds needed",
    "across rates",
]


def _score_rows(scores: Sequence[RateScore], picks: dict[str, Pick]) -> list[dict[str, Any]]:
    """The rule's table (``tuning.csv``): each variant and rate, whether eligible and whether picked."""
    return [
        {
            "variant": s.variant,
            "learning rate": s.rate,
            "tuning seeds": s.n,
            "mean final val loss": s.mean_final,
            "diverged seeds": s.diverged,
            "eligible": "yes" if s.eligible else "no" if s.complete else f"no: {s.n} of {s.seeds} seeds",
            "picked": "yes" if picks[s.variant].rate == s.rate else "",
        }
        for s in scores
    ]


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
    run_rows = provenance(runs, protocol, commits)
    _write_csv(out / "run_metrics.csv", run_rows, list(run_rows[0]))
    picks = pick_rates(runs, grid)
    score_rows = _score_rows(rate_scores(runs), picks)
    _write_csv(out / "tuning.csv", score_rows, list(score_rows[0]))
    at_rates = claims_at_rates(runs, analysis)
    _write_csv(out / "claims_by_rate.csv", at_rates, BY_RATE_COLUMNS)
    tuned = tuned_claims(runs, analysis, picks, at_rates)
    rates = sorted({float(key[len(AT_RATE) :]) for row in tuned for key in row if key.startswith(AT_RATE)})
    _write_csv(out / "claims.csv", tuned, [*CLAIM_COLUMNS, *(f"{AT_RATE}{rate:g}" for rate in rates)])
    plot = figure(at_rates, tuned, out / "claims_vs_rate.png")
    lines = [
        *_header(protocol, commits, run_rows),
        *_picks(score_rows, picks),
        *_claims(tuned, at_rates),
        *([f"![paired difference against the learning rate]({plot.name})", ""] if plot is not None else []),
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[str]:
    head = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return head + ["| " + " | ".join(str(_cell(row.get(c))) for c in columns) + " |" for row in rows]


def _header(protocol: Path, commits: list[str], run_rows: list[dict[str, Any]]) -> list[str]:
    lines = ["# Each remedy at its own learning rate", ""]
    if commits:
        lines.append(f"Protocol: `{protocol.name}` at commit {commits[0][:7]} (first committed at {commits[-1][:7]}).")
    else:
        lines.append(f"Protocol: `{protocol.name}` (no git history found: its commits cannot be checked).")
    marked = [row for row in run_rows if row["protocol"]]
    phases = {phase: sum(row["phase"] == phase for row in run_rows) for phase in PHASES}
    return [
        *lines,
        "",
        f"Runs read: {phases['tuning']} tuning, {phases['verdict']} verdict; "
        f"{len(marked)} marked in `run_metrics.csv` (column `protocol`) as made outside the current "
        "protocol version or without a recorded commit.",
        "",
    ]


def _picks(score_rows: list[dict[str, Any]], picks: dict[str, Pick]) -> list[str]:
    lines = [
        "## The rule's picks",
        "",
        "Each variant's eligible tuning rate with the lowest mean final validation loss (no tuning seed diverged).",
        "",
        *_table(score_rows, list(score_rows[0])),
        "",
    ]
    for variant, pick in sorted(picks.items()):
        rate = "none eligible" if pick.rate is None else f"{pick.rate:g}"
        edge = f" — at the grid's {pick.at_edge} rate: the protocol extends the grid" if pick.at_edge else ""
        missing = ", ".join(f"{r:g}" for r in pick.missing)
        wait = f" — provisional: {missing} not yet run on every tuning seed" if pick.provisional else ""
        lines.append(f"- {variant}: {rate}{edge}{wait}")
    return lines


def _claims(tuned: list[dict[str, Any]], at_rates: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## Claims at the tuned rates", ""]
    if not any(row["n"] for row in tuned):
        lines.append("No verdict runs yet: the claims are decided on them only.")
    else:
        lines.append(
            f"{len(tuned)} claims tested; Holm's adjustment over all of them at a family-wise 0.025 (one-sided). "
            "For an undecided claim, *seeds needed* is the n at which its measured spread would tell its "
            "measured mean apart, with 80% power, from the nearest line of the rule (0 or the margin)."
        )
    hidden = ("measure", "expected", "mean", "low", "high")  # the difference column says them
    columns = [c for c in tuned[0] if c not in hidden and not c.startswith(AT_RATE)]  # shared rates: next table
    by_rate = ["claim", "level", "reference", "learning rate", "n", "difference", "verdict"]
    return [
        *lines,
        "",
        *_table(tuned, columns),
        "",
        "## Claims at every shared rate (tuning runs)",
        "",
        *_table(at_rates, by_rate),
        "",
    ]
