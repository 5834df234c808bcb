"""A study's claims, written in its sweep file before it runs, and their verdicts from the numbers.

The sweep file's ``analysis`` section names what the runs are compared against and the margins
that decide each claim, so nothing is chosen after the results are seen::

    analysis:
      axis: variant              # the label whose levels are compared
      reference: tied_orth       # the level every other one is compared with, paired by seed
      targets: [0.25, 0.5, 1.0]  # nats below the in-domain unigram baseline: "steps to target"
      claims:
        - text: the scaled initialisation converges slowest
          study: clm
          levels: [tied_scaled_init]  # a level: its axis value, then any other label but the seed
                                      # ("32, head=untied")
          metric: steps          # steps to a target (``target``), or final_loss
          target: 1.0
          expect: higher         # higher, lower or alike
          margin: 50             # in the metric's unit
          reference: untied      # optional: another reference for this claim only

For each level the paired differences ``level - reference`` (one per seed both ran) give a mean
and a 95% interval (Student's t with n - 1 degrees of freedom). The verdict follows from the
interval alone:

* ``alike``: holds when the interval lies inside (-margin, margin); does not hold when it lies
  wholly outside [-margin, margin]; otherwise "cannot tell at this n".
* ``higher`` (``lower``): holds when the interval lies wholly above (below) 0 and reaches the
  margin; "holds, smaller than the margin" when it lies inside (0, ``margin``) (inside
  (``-margin``, 0)): the difference is real but smaller than the claim calls meaningful; does not
  hold when it reaches 0 (or beyond) and lies wholly below ``margin`` (above ``-margin``), i.e. any
  effect in the claimed direction is smaller than the margin; otherwise "cannot tell at this n".

A run that never reached a target has no step count. Its steps are then known only to exceed
the last step it ran: that bound still decides a ``higher`` claim about the level that did not
reach (its true difference is at least the bound's), and leaves any other claim undecided.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tiedemb.errors import UserError

ANALYSIS_KEYS = ("axis", "reference", "targets", "common_target", "claims")
CLAIM_KEYS = ("text", "study", "levels", "metric", "target", "expect", "margin", "reference")
METRICS = ("final_loss", "steps")
EXPECTATIONS = ("alike", "higher", "lower")
HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "cannot tell at this n"
HOLDS_SMALL = "holds, smaller than the margin"
UNDECIDED_AFTER_HOLM = "cannot tell after Holm"
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Claim:
    text: str
    study: str
    levels: tuple[str, ...]
    metric: str  # "final_loss" or "steps"
    expect: str  # "alike", "higher" or "lower"
    margin: float
    target: float | None = None  # nats below the unigram baseline, for "steps"
    reference: str | None = None  # the claim's own reference; None: the analysis's

    @property
    def metric_name(self) -> str:
        return self.metric if self.metric != "steps" else f"steps to unigram - {self.target:g}"


@dataclass(frozen=True)
class Analysis:
    axis: str
    reference: str
    targets: tuple[float, ...]
    claims: tuple[Claim, ...] = field(default_factory=tuple)
    # The convergence-cost target, as a fraction of the reference's run: the reference level's mean
    # validation loss at that fraction of its steps, which every level's steps are counted to.
    common_target: float | None = None


def comparisons(analysis: Analysis | None) -> list[tuple[Claim, str, str]]:
    """(claim, level, reference) of every level of every claim."""
    if analysis is None:
        return []
    return [
        (claim, level, claim.reference or analysis.reference) for claim in analysis.claims for level in claim.levels
    ]


def parse_analysis(raw: Any, studies: Sequence[str], where: str) -> Analysis | None:
    """The sweep file's ``analysis`` section, checked (``None`` when the file has none)."""
    if raw is None:
        return None
    where = f"{where}: analysis"
    raw = mapping_of(raw, where)
    check_keys(raw, ANALYSIS_KEYS, where)
    for key in ("axis", "reference"):
        if not isinstance(raw.get(key), (str, int)) or isinstance(raw.get(key), bool):
            raise UserError(f"{where}: {key} must be a label value (a string), got {raw.get(key)!r}")
    targets = tuple(_number(value, f"{where}: targets") for value in _list(raw.get("targets", []), f"{where}: targets"))
    claims = []
    for index, item in enumerate(_list(raw.get("claims", []), f"{where}: claims")):
        claim_where = f"{where}: claims[{index}]"
        item = mapping_of(item, claim_where)
        check_keys(item, CLAIM_KEYS, claim_where)
        missing = [key for key in ("text", "study", "levels", "metric", "expect", "margin") if key not in item]
        if missing:
            raise UserError(f"{claim_where}: {', '.join(missing)} missing")
        if str(item["study"]) not in studies:
            raise UserError(
                f"{claim_where}: study {item['study']!r} is not in the file (studies: {', '.join(studies)})"
            )
        metric, expect = str(item["metric"]), str(item["expect"])
        if metric not in METRICS:
            raise UserError(f"{claim_where}: metric={metric!r} is not one of {', '.join(METRICS)}")
        if expect not in EXPECTATIONS:
            raise UserError(f"{claim_where}: expect={expect!r} is not one of {', '.join(EXPECTATIONS)}")
        target = item.get("target")
        if metric == "steps":
            target = _number(target, f"{claim_where}: target")
            if target not in targets:
                raise UserError(
                    f"{claim_where}: target={target:g} is not one of the analysis targets "
                    f"({', '.join(f'{t:g}' for t in targets) or 'none'})"
                )
        elif target is not None:
            raise UserError(f"{claim_where}: target has no effect with metric='final_loss'")
        margin = _number(item["margin"], f"{claim_where}: margin")
        if margin < 0 or (expect == "alike" and margin == 0):
            raise UserError(f"{claim_where}: margin={margin:g} must be positive for 'alike' and not negative otherwise")
        levels = tuple(str(level) for level in _list(item["levels"], f"{claim_where}: levels"))
        if not levels:
            raise UserError(f"{claim_where}: levels is empty")
        reference = None if item.get("reference") is None else str(item["reference"])
        claims.append(Claim(str(item["text"]), str(item["study"]), levels, metric, expect, margin, target, reference))
    common = raw.get("common_target")
    if common is not None:
        common = _number(common, f"{where}: common_target")
        if not 0 < common <= 1:
            raise UserError(f"{where}: common_target={common:g} must be a fraction of the reference's run in (0, 1]")
    return Analysis(str(raw["axis"]), str(raw["reference"]), targets, tuple(claims), common)


# --------------------------------------------------------------------------- numbers


def steps_to_target(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """The step at which a validation curve first reaches ``target``, interpolated linearly
    between the last evaluation above it and the first at or below it; ``None`` if never."""
    previous = None
    for step, loss in sorted(curve):
        if loss <= target:
            if previous is None or previous[1] == loss:
                return float(step)
            (step0, loss0) = previous
            return float(step0 + (loss0 - target) / (loss0 - loss) * (step - step0))
        previous = (step, loss)
    return None


@dataclass(frozen=True)
class Difference:
    """Paired differences ``level - reference`` over the seeds both have: mean and 95% interval."""

    n: int
    mean: float
    low: float
    high: float
    bound_only: bool = False  # some values were lower bounds (a level that never reached a target)
    sd: float = math.nan  # the paired differences' sample standard deviation (n >= 2)

    def format(self, digits: int = 3) -> str:
        if self.n == 0:
            return "no paired seeds"
        if self.n == 1 or not math.isfinite(self.low):
            return f"{self.mean:+.{digits}f} (n = {self.n}: no interval)"
        bound = ", lower bound" if self.bound_only else ""
        return f"{self.mean:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}] (n = {self.n}{bound})"


def t_half_width(sd: float, n: int) -> float:
    """Half the 95% Student's t interval of a mean of ``n`` values of sample standard deviation ``sd``."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)


def paired_difference(
    level: Mapping[str, float], reference: Mapping[str, float], bound_only: bool = False
) -> Difference:
    """Mean and 95% t-interval of ``level[s] - reference[s]`` over the seeds ``s`` both have."""
    seeds = sorted(set(level) & set(reference))
    diffs = [level[s] - reference[s] for s in seeds]
    n = len(diffs)
    if n == 0:
        return Difference(0, math.nan, math.nan, math.nan)
    mean = sum(diffs) / n
    if n == 1:
        return Difference(1, mean, -math.inf, math.inf, bound_only)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_half_width(sd, n)
    return Difference(n, mean, mean - half, mean + half, bound_only, sd)


def measured(run: Any, metric: str, target: float | None) -> tuple[float, bool] | None:
    """A run's final loss, or its steps to ``target`` (its last step, a lower bound, where it never got
    there), and whether it is only that bound; ``run``: anything with ``final``, ``steps`` and ``last_step``."""
    if metric == "final_loss":
        return None if run.final is None or not math.isfinite(run.final) else (run.final, False)
    if run.steps.get(target) is not None:
        return run.steps[target], False
    last = run.last_step
    return None if last is None or not math.isfinite(last) else (float(last), True)


def claim_difference(
    level: Mapping[str, Any], reference: Mapping[str, Any], metric: str, target: float | None
) -> Difference:
    """``level - reference`` over the runs of the seeds both have (seed -> run, as ``measured`` reads it):
    a lower bound where a level's run never reached the target; unknown (no paired seeds) where a
    reference's run never did."""
    mine, theirs = (
        {seed: found for seed, run in runs.items() if (found := measured(run, metric, target)) is not None}
        for runs in (level, reference)
    )
    shared = set(mine) & set(theirs)
    if any(theirs[seed][1] for seed in shared):
        return Difference(0, math.nan, math.nan, math.nan)
    return paired_difference(
        {seed: value for seed, (value, _) in mine.items()},
        {seed: value for seed, (value, _) in theirs.items()},
        bound_only=any(mine[seed][1] for seed in shared),
    )


def verdict(difference: Difference, expect: str, margin: float) -> str:
    """``holds``, ``does not hold`` or ``cannot tell at this n`` (rules in the module docstring)."""
    low, high = difference.low, difference.high
    if difference.n < 2 or math.isnan(low):
        return UNDECIDED
    if difference.bound_only:
        # Only a lower bound on the differences is known: it can show "higher", nothing else.
        return HOLDS if expect == "higher" and low > 0 else UNDECIDED
    if expect == "alike":
        if -margin < low and high < margin:
            return HOLDS
        return FAILS if low > margin or high < -margin else UNDECIDED
    if expect == "higher":
        if low > 0:
            return HOLDS_SMALL if high < margin else HOLDS
        return FAILS if high < margin else UNDECIDED
    if high < 0:
        return HOLDS_SMALL if low > -margin else HOLDS
    return FAILS if low > -margin else UNDECIDED


def claim_p_value(difference: Difference, expect: str, margin: float) -> float:
    """The one-sided paired t-test of what "holds" asserts: the difference is above 0 (``higher``),
    below 0 (``lower``), or inside (-margin, margin) (``alike``: the larger of the two one-sided
    tests against each bound). Comparing it with 0.025 decides as the 95% interval does."""
    from scipy import stats

    if difference.n < 2 or not math.isfinite(difference.sd) or difference.bound_only and expect != "higher":
        return math.nan
    se = difference.sd / math.sqrt(difference.n)
    df = difference.n - 1

    def above(bound: float) -> float:  # p of "the mean difference is above bound"
        if se == 0:
            return 0.0 if difference.mean > bound else 1.0
        return float(stats.t.sf((difference.mean - bound) / se, df))

    def below(bound: float) -> float:
        if se == 0:
            return 0.0 if difference.mean < bound else 1.0
        return float(stats.t.cdf((difference.mean - bound) / se, df))

    if expect == "higher":
        return above(0.0)
    if expect == "lower":
        return below(0.0)
    return max(above(-margin), below(margin))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: the k-th smallest of m p-values times (m - k + 1), made
    non-decreasing in that order and capped at 1. A missing (nan) p-value stays nan and is not
    counted among the m tests."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(indexed)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def holm_verdict(raw: str, adjusted_p: float, alpha: float = (1 - CONFIDENCE) / 2) -> str:
    """A raw verdict after Holm's adjustment: a claim that holds raw holds after it only when its
    adjusted p-value is below ``alpha``; other verdicts are left as they are."""
    if raw in (HOLDS, HOLDS_SMALL) and not adjusted_p < alpha:
        return UNDECIDED_AFTER_HOLM
    return raw


def decide(compared: Sequence[tuple[Claim, str, str, Difference]]) -> list[dict[str, Any]]:
    """A row per (claim, level, reference, paired difference): its verdict, the one-sided p-value of
    what "holds" asserts and Holm's adjustment over all the rows (``None`` where there is no p-value).
    ``Δ`` keeps the difference for figures; a table lists the columns it shows."""
    rows = []
    for claim, level, reference, difference in compared:
        p_value = claim_p_value(difference, claim.expect, claim.margin)
        rows.append(
            {
                "claim": claim.text,
                "level": level,
                "reference": reference,
                "measure": claim.metric_name,
                "expected": claim.expect,
                "margin": f"{claim.margin:g}",
                "n": difference.n,
                "difference": difference.format(0 if claim.metric == "steps" else 3),
                "verdict": verdict(difference, claim.expect, claim.margin),
                "p": None if math.isnan(p_value) else p_value,
                "Δ": difference,
            }
        )
    for row, adjusted in zip(rows, holm([math.nan if row["p"] is None else row["p"] for row in rows])):
        row["Holm p"] = None if math.isnan(adjusted) else adjusted
        row["Holm verdict"] = holm_verdict(row["verdict"], adjusted)
    return rows


# --------------------------------------------------------------------------- checks


def mapping_of(value: Any, where: str) -> dict[str, Any]:
    """A YAML mapping of a sweep or claims file (unset: empty), else a ``UserError`` naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a mapping, got {type(value).__name__} {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise UserError(f"{where} must be a list, got {type(value).__name__}")
    return value


def check_keys(mapping: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise UserError(f"{where}: unknown key {key!r}; valid: {', '.join(allowed)}")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{where} must be a number, got {value!r}")
    return float(value)
