"""A study with each variant at its own learning rate: the rate a fixed rule picks, then the claims.

Its input is what ``tiedemb report`` writes for each folder of runs (``run_metrics.csv``), read
back with the phase the protocol gives it: ``tuning`` runs (a grid of rates on tuning seeds and
one corpus split) or ``verdict`` runs (every variant at its tuned rate, seeds and corpus splits of
their own). A table without a learning-rate column (a fixed-rate study) is given its rate.

* ``pick_rates``: the protocol's rule. A rate at which any tuning seed of a variant diverged (a
  non-finite loss, or a final loss above the run's unigram loss) is not eligible; among the rest
  the lowest mean final loss wins. A pick at an edge of the grid is flagged: the protocol then
  extends the grid.
* ``claims_at_rates``: each claim's paired difference and verdict at every rate both variants of
  the claim share in the tuning runs.
* ``tuned_claims``: each claim on the verdict runs, raw and Holm-adjusted over all claims, with
  the n its measured spread would need, and whether it holds robustly (at the tuned rates and at
  every shared rate where neither variant diverged).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.experiments.claims import (
    FAILS,
    HOLDS,
    HOLDS_SMALL,
    UNDECIDED,
    Analysis,
    Claim,
    Difference,
    claim_p_value,
    decision_gap,
    holm,
    holm_verdict,
    paired_difference,
    seeds_needed,
    verdict,
)

PHASES = ("tuning", "verdict")
RATE_COLUMN = "learning_rate"
FINAL = "final val loss"
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
        """A non-finite final loss, or a final loss above the run's own unigram loss."""
        return not math.isfinite(self.final_loss) or (math.isfinite(self.unigram) and self.final_loss > self.unigram)


def _number(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except ValueError:
        return math.nan


def read_runs(path: Path, phase: str, rate: float | None = None) -> list[RunRow]:
    """The finished runs of one ``run_metrics.csv``; ``rate`` for a table without a rate column."""
    if phase not in PHASES:
        raise UserError(f"phase {phase!r} is not one of {', '.join(PHASES)}")
    if not path.is_file():
        raise UserError(f"{path}: no such run table (tiedemb report writes run_metrics.csv)")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    found = []
    for row in rows:
        if row.get("study", "clm") != "clm" or row.get("state") != "finished":
            continue
        if RATE_COLUMN in row and row[RATE_COLUMN] != "":
            run_rate = float(row[RATE_COLUMN])
        elif rate is not None:
            run_rate = rate
        else:
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
                rate=run_rate,
                seed=str(row.get("seed_everything") or row.get("seed")),
                corpus_seed=str(row.get("corpus seed", "")),
                state=row["state"],
                final_loss=_number(row.get(FINAL)),
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
    """The protocol's rule: each variant's eligible tuning rate with the lowest mean final loss.

    ``grid``: the protocol's rates; a variant with a grid rate not run on every tuning seed has a
    provisional pick (an incomplete rate is never eligible)."""
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


def _metric(run: RunRow, claim: Claim) -> tuple[float, bool] | None:
    """The claim's number for a run and whether it is only a lower bound (never reached)."""
    if claim.metric == "final_loss":
        return (run.final_loss, False) if math.isfinite(run.final_loss) else None
    value = run.steps.get(claim.target)
    if value is None:
        return (run.last_step, True) if math.isfinite(run.last_step) else None
    return value, False


def compare(level: Sequence[RunRow], reference: Sequence[RunRow], claim: Claim) -> Difference:
    """``level - reference`` paired by seed, for one claim's metric."""
    mine = {run.seed: _metric(run, claim) for run in level}
    theirs = {run.seed: _metric(run, claim) for run in reference}
    mine = {seed: value for seed, value in mine.items() if value is not None}
    theirs = {seed: value for seed, value in theirs.items() if value is not None}
    if any(bound for _, bound in theirs.values()):  # the reference's steps unknown: no difference
        return Difference(0, math.nan, math.nan, math.nan)
    bound = any(bound for _, bound in mine.values())
    return paired_difference(
        {seed: value for seed, (value, _) in mine.items()},
        {seed: value for seed, (value, _) in theirs.items()},
        bound_only=bound,
    )


def _reference(claim: Claim, analysis: Analysis) -> str:
    return claim.reference or analysis.reference


def _pairs(analysis: Analysis) -> list[tuple[Claim, str, str]]:
    return [(claim, level, _reference(claim, analysis)) for claim in analysis.claims for level in claim.levels]


def claims_at_rates(runs: Sequence[RunRow], analysis: Analysis) -> list[dict[str, Any]]:
    """Each claim at each rate both of its variants ran in the tuning phase."""
    tuning = [run for run in runs if run.phase == "tuning"]
    rows = []
    for claim, level, reference in _pairs(analysis):
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
    for claim, level, reference in _pairs(analysis):
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
    for row in rows:
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


# --------------------------------------------------------------------------- provenance


def _git_log(protocol: Path, *args: str) -> str | None:
    """``git log ARGS -- PROTOCOL`` in the protocol's folder; None outside a git checkout."""
    from tiedemb.experiments.cells import git

    return git(["log", *args, "--", protocol.name], protocol.parent)


def protocol_commits(protocol: Path) -> list[str]:
    """The commits of the protocol file, newest first (empty outside a git checkout)."""
    return (_git_log(protocol, "--format=%H") or "").split()


def governing_commit(protocol: Path, commit: str) -> str | None:
    """The protocol's version at a run's commit: its newest commit that is an ancestor of it."""
    if not commit:
        return None
    return (_git_log(protocol, "-1", "--format=%H", commit) or "").strip() or None
