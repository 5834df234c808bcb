"""The rate study's report: the rule's picks, the claims at the tuned rates and at every shared
rate, a figure of the differences against the learning rate, and each run's provenance.

Files written to the output folder: ``run_metrics.csv`` (every run read, with its phase, rate,
seeds, corpus split, whether it diverged, commit, start and the protocol version that governed
it), ``tuning.csv`` (the rule's table), ``claims_by_rate.csv``, ``claims.csv``,
``claims_vs_rate.png`` and ``report.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tiedemb.errors import UserError
from tiedemb.experiments import plots
from tiedemb.experiments.claims import Analysis, parse_analysis
from tiedemb.experiments.rate_study import (
    AT_RATE,
    Pick,
    RateScore,
    RunRow,
    claims_at_rates,
    governing_commit,
    pick_rates,
    protocol_commits,
    rate_scores,
    tuned_claims,
)
from tiedemb.experiments.report_writer import write_rows

STUDY = "clm"


def read_claims(path: Path) -> Analysis:
    """The claims file: a sweep file's ``analysis`` section (experiments/claims.py) on its own."""
    if not path.is_file():
        raise UserError(f"{path}: no such claims file")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    analysis = parse_analysis(raw.get("analysis"), [STUDY], str(path))
    if analysis is None or not analysis.claims:
        raise UserError(f"{path}: no analysis section with claims")
    return analysis


def _write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    write_rows(list(columns), [[_cell(row.get(key)) for key in columns] for row in rows], path)


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


def provenance(runs: Sequence[RunRow], protocol: Path) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """Each run's row with the protocol version that governed it; the protocol's current and first commit."""
    commits = protocol_commits(protocol)
    current, first = (commits[0], commits[-1]) if commits else (None, None)
    rows = []
    for run in runs:
        governed = governing_commit(protocol, run.commit) if commits else None
        if not run.commit:
            note = "commit not recorded"
        elif governed is None:
            note = "before the protocol (named in it as a tuning run)" if commits else "no git history to check"
        elif governed != current:
            note = f"made under protocol version {governed[:7]}, not the current one"
        else:
            note = ""
        rows.append(
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
                "protocol": note,
                "source": run.source,
            }
        )
    return rows, current, first


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
    variants = {name for claim in analysis.claims for name in (*claim.levels, claim.reference or analysis.reference)}
    tuning = [run for run in tuning if run.variant in variants]
    verdict_runs = [run for run in verdict_runs if run.variant in variants]
    runs = [*tuning, *verdict_runs]
    if not tuning:
        raise UserError("no finished tuning runs were read: nothing to pick a rate from")
    out.mkdir(parents=True, exist_ok=True)
    run_rows, current, first = provenance(runs, protocol)
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
    lines = _markdown(analysis, run_rows, score_rows, picks, at_rates, tuned, current, first, plot, protocol)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[str]:
    head = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return head + ["| " + " | ".join(str(_cell(row.get(c))) for c in columns) + " |" for row in rows]


def _markdown(analysis, run_rows, score_rows, picks, at_rates, tuned, current, first, plot, protocol) -> list[str]:
    lines = ["# Each remedy at its own learning rate", ""]
    if current:
        lines.append(f"Protocol: `{protocol.name}` at commit {current[:7]} (first committed at {first[:7]}).")
    else:
        lines.append(f"Protocol: `{protocol.name}` (no git history found: its commits cannot be checked).")
    marked = [row for row in run_rows if row["protocol"]]
    phases = {phase: sum(row["phase"] == phase for row in run_rows) for phase in ("tuning", "verdict")}
    lines += [
        "",
        f"Runs read: {phases['tuning']} tuning, {phases['verdict']} verdict; "
        f"{len(marked)} marked in `run_metrics.csv` (column `protocol`) as made outside the current "
        "protocol version or without a recorded commit.",
        "",
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
        wait = (
            f" — provisional: {', '.join(f'{r:g}' for r in pick.missing)} not yet run on every tuning seed"
            if pick.provisional
            else ""
        )
        lines.append(f"- {variant}: {rate}{edge}{wait}")
    lines += ["", "## Claims at the tuned rates", ""]
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
    lines += ["", *_table(tuned, columns), ""]
    lines += ["## Claims at every shared rate (tuning runs)", ""]
    lines += [*_table(at_rates, ["claim", "level", "reference", "learning rate", "n", "difference", "verdict"]), ""]
    if plot is not None:
        lines += [f"![paired difference against the learning rate]({plot.name})", ""]
    return lines
