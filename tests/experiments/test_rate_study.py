"""The rate study on hand-made run tables: the rule that picks a rate, claims at every shared rate
and at the tuned rates, Holm beside the raw verdicts, and the report's files."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from tiedemb.errors import UserError
from tiedemb.experiments.claims import FAILS, HOLDS, HOLDS_SMALL, UNDECIDED, parse_analysis
from tiedemb.experiments.rate_study import (
    RunRow,
    claims_at_rates,
    pick_rates,
    rate_scores,
    read_runs,
    robustness,
    tuned_claims,
)


def run(variant, rate, seed, final, steps=None, phase="tuning", unigram=7.0, last=1000.0):
    return RunRow(
        phase=phase,
        variant=variant,
        rate=rate,
        seed=str(seed),
        corpus_seed=str(seed if phase == "verdict" else 0),
        final=final,
        unigram=unigram,
        last_step=last,
        steps={1.0: steps},
        commit="",
        started="",
        source="hand-made",
    )


def test_the_rule_picks_the_lowest_mean_final_loss_among_rates_where_no_seed_diverged():
    runs = [
        *(run("a", 0.001, s, 5.5) for s in range(3)),
        *(run("a", 0.003, s, 5.3) for s in range(3)),
        run("a", 0.01, 0, 5.0),  # best mean, but one seed diverged (above its unigram loss of 7.0)
        run("a", 0.01, 1, 5.0),
        run("a", 0.01, 2, 7.5),
        *(run("b", 0.001, s, 5.2) for s in range(3)),
        *(run("b", 0.003, s, 5.4) for s in range(3)),
        *(run("b", 0.01, s, math.nan) for s in range(3)),  # non-finite: diverged
    ]
    scores = {(s.variant, s.rate): s for s in rate_scores(runs)}
    assert scores[("a", 0.01)].diverged == 1 and not scores[("a", 0.01)].eligible
    assert scores[("a", 0.003)].mean_final == pytest.approx(5.3)
    picks = pick_rates(runs)
    assert picks["a"].rate == 0.003 and picks["a"].at_edge == ""
    assert picks["b"].rate == 0.001 and picks["b"].at_edge == "lowest"  # the protocol extends the grid


def test_a_pick_at_the_highest_rate_is_flagged():
    runs = [run("a", rate, s, 6.0 - 100 * rate) for rate in (0.001, 0.003, 0.01) for s in range(2)]
    assert pick_rates(runs)["a"].at_edge == "highest"


ANALYSIS = parse_analysis(
    {
        "axis": "variant",
        "reference": "ref",
        "targets": [1.0],
        "claims": [
            {
                "text": "slow",
                "study": "clm",
                "levels": ["slow"],
                "metric": "steps",
                "target": 1.0,
                "expect": "higher",
                "margin": 50,
            },
            {
                "text": "same end",
                "study": "clm",
                "levels": ["slow"],
                "metric": "final_loss",
                "expect": "alike",
                "margin": 0.05,
            },
        ],
    },
    ["clm"],
    "test",
)


def _study_runs():
    runs = []
    for rate, gap in ((0.001, 100.0), (0.003, 30.0)):  # slower by 100 steps at one rate, 30 at the other
        shift = {"ref": 0.05 if rate == 0.003 else 0.0, "slow": -0.05 if rate == 0.003 else 0.0}  # ref best at
        for s in range(3):  # 0.001, slow at 0.003
            runs.append(run("ref", rate, s, 5.0 + 0.01 * s + shift["ref"], steps=300.0 + 10 * s))
            final = 5.0 + 0.01 * s + 0.002 * (s - 1) + shift["slow"]
            runs.append(run("slow", rate, s, final, steps=300.0 + 10 * s + gap + 5 * (s - 1)))
    for s in range(3, 11):  # verdict runs: slow at 0.003, ref at 0.001, 80 steps slower
        runs.append(run("ref", 0.001, s, 5.1 + 0.01 * s, steps=400.0 + s, phase="verdict"))
        runs.append(run("slow", 0.003, s, 5.1 + 0.01 * s + 0.001 * (s % 2), steps=480.0 + s + (s % 3), phase="verdict"))
    return runs


def test_claims_are_decided_at_each_shared_rate_and_at_the_tuned_rates_with_holm_beside():
    runs = _study_runs()
    at_rates = claims_at_rates(runs, ANALYSIS)
    slow = {row["learning rate"]: row for row in at_rates if row["claim"] == "slow"}
    assert slow[0.001]["verdict"] == HOLDS and slow[0.001]["Δ"].mean == pytest.approx(100.0)
    assert slow[0.003]["verdict"] == HOLDS_SMALL  # real, but inside (0, 50)
    picks = pick_rates(runs)
    assert (picks["ref"].rate, picks["slow"].rate) == (0.001, 0.003)
    tuned = {row["claim"]: row for row in tuned_claims(runs, ANALYSIS, picks, at_rates)}
    assert tuned["slow"]["n"] == 8 and tuned["slow"]["level rate"] == 0.003 and tuned["slow"]["reference rate"] == 0.001
    assert tuned["slow"]["verdict"] == HOLDS and tuned["slow"]["Holm verdict"] == HOLDS
    assert tuned["slow"]["p"] < 1e-6 and tuned["slow"]["Holm p"] == pytest.approx(min(1.0, 2 * tuned["slow"]["p"]))
    # held at the tuned rates and at both shared rates (one of them only smaller than the margin)
    assert tuned["slow"]["across rates"] == "holds robustly"


def test_robustness_needs_the_claim_to_hold_at_every_shared_rate():
    assert robustness(HOLDS, [HOLDS, HOLDS_SMALL]) == "holds robustly"
    assert robustness(HOLDS, [HOLDS, FAILS]).startswith("holds at the tuned rates only (does not hold at 1")
    assert "undecided at 1" in robustness(HOLDS, [UNDECIDED])
    assert robustness(FAILS, [HOLDS]) == "—"


def _write_table(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_fixed_rate_table_needs_its_rate_and_unfinished_runs_are_left_out(tmp_path):
    row = {
        "run": "r",
        "study": "clm",
        "variant": "ref",
        "state": "finished",
        "seed_everything": "0",
        "corpus seed": "0",
        "final val loss": "5.1",
        "unigram": "7.0",
        "last step": "976",
        "steps to unigram - 1": "",
        "commit": "abc",
    }
    table = _write_table(tmp_path / "run_metrics.csv", [row, {**row, "run": "x", "state": "failed"}])
    with pytest.raises(UserError, match="give the table's rate"):
        read_runs(table, "tuning")
    (found,) = read_runs(table, "tuning", 0.003)
    assert (found.rate, found.final, found.steps[1.0], found.last_step) == (0.003, 5.1, None, 976.0)


def test_the_rate_report_writes_its_tables_and_names_the_protocol(tmp_path):
    from tiedemb.rate_report import main

    rows = []
    for r in _study_runs():
        rows.append(
            {
                "run": f"{r.variant}-{r.rate}-{r.seed}",
                "study": "clm",
                "variant": r.variant,
                "learning_rate": r.rate,
                "state": "finished",
                "seed_everything": r.seed,
                "corpus seed": r.corpus_seed,
                "final val loss": r.final,
                "unigram": r.unigram,
                "last step": r.last_step,
                "steps to unigram - 1": r.steps[1.0],
                "commit": "",
                "phase": r.phase,
            }
        )
    tuning = _write_table(tmp_path / "tuning.csv", [row for row in rows if row["phase"] == "tuning"])
    verdict = _write_table(tmp_path / "verdict.csv", [row for row in rows if row["phase"] == "verdict"])
    claims = tmp_path / "claims.yaml"
    claims.write_text(
        "analysis:\n  axis: variant\n  reference: ref\n  targets: [1.0]\n  claims:\n"
        "    - {text: slow, study: clm, levels: [slow], metric: steps, target: 1.0, expect: higher, margin: 50}\n",
        encoding="utf-8",
    )
    protocol = tmp_path / "protocol.md"
    protocol.write_text("# protocol\n", encoding="utf-8")
    out = tmp_path / "out"
    assert (
        main(
            [
                "--claims",
                str(claims),
                "--protocol",
                str(protocol),
                "--tuning",
                str(tuning),
                "--verdict",
                str(verdict),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    for name in (
        "run_metrics.csv",
        "tuning.csv",
        "claims_by_rate.csv",
        "claims.csv",
        "claims_vs_rate.png",
        "report.md",
    ):
        assert (out / name).is_file(), name
    with open(out / "claims.csv", newline="", encoding="utf-8") as handle:
        (claim,) = list(csv.DictReader(handle))
    # the rule's picks: ref at 0.001, slow at 0.003; the verdict runs pair across the two rates
    assert (claim["level rate"], claim["reference rate"], claim["n"]) == ("0.003", "0.001", "8")
    assert claim["verdict"] == claim["Holm verdict"] == "holds" and claim["across rates"] == "holds robustly"
    # the claim at each shared rate of the tuning runs
    with open(out / "claims_by_rate.csv", newline="", encoding="utf-8") as handle:
        shared = {row["learning rate"]: (row["difference"], row["verdict"]) for row in csv.DictReader(handle)}
    assert shared == {
        "0.001": ("+100 [+88, +112] (n = 3)", "holds"),
        "0.003": ("+30 [+18, +42] (n = 3)", "holds, smaller than the margin"),
    }
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "Protocol: `protocol.md`" in report and "no git history" in report
    assert "- ref: 0.001 — at the grid's lowest rate" in report and "| slow | 0.003 | 3 |" in report


def test_a_missing_claims_file_is_one_line(tmp_path, capsys):
    from tiedemb.rate_report import main

    table = _write_table(tmp_path / "t.csv", [{"variant": "a", "state": "finished", "learning_rate": "0.01"}])
    code = main(
        [
            "--claims",
            str(tmp_path / "none.yaml"),
            "--protocol",
            str(tmp_path / "p.md"),
            "--tuning",
            str(table),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such claims file" in err[0]
    assert not (tmp_path / "o").exists()


def test_a_rate_not_run_on_every_tuning_seed_is_not_eligible_and_the_pick_waits_for_the_grid():
    runs = [
        *(run("a", 0.001, s, 5.5) for s in range(3)),
        *(run("a", 0.003, s, 5.3) for s in range(3)),
        run("a", 0.01, 0, 5.0),  # the lowest loss, but one seed of three: not eligible yet
    ]
    scores = {s.rate: s for s in rate_scores(runs)}
    assert not scores[0.01].complete and not scores[0.01].eligible
    pick = pick_rates(runs, grid=(0.001, 0.003, 0.01, 0.03))["a"]
    assert pick.rate == 0.003 and pick.missing == (0.01, 0.03)  # provisional
    done = [*runs, run("a", 0.01, 1, 5.0), run("a", 0.01, 2, 5.0), *(run("a", 0.03, s, 6.0) for s in range(3))]
    final = pick_rates(done, grid=(0.001, 0.003, 0.01, 0.03))["a"]
    assert final.rate == 0.01 and not final.missing and final.at_edge == ""
