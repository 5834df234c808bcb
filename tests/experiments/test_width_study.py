"""The width study's evidence from hand-made runs: the gap to full width, the pilot's rule and the
three tables beside the source's figures (tiedemb.experiments.width_study)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import yaml
from run_folders import make_cell, pretrain_metrics

from tiedemb.experiments import layout, plots
from tiedemb.experiments.evidence import collect
from tiedemb.experiments.report_writer import build_report
from tiedemb.experiments.runs import find_runs
from tiedemb.experiments.width_pilot import main as pilot_main
from tiedemb.experiments.width_study import gap_curves, pilot_reading, source_width

# Final losses per width: gains 0.010, 0.005, 0.005, 0 up the ladder; time constants in steps.
FINAL = {21: 5.16, 43: 5.15, 64: 5.145, 85: 5.14, 128: 5.14}
TAU = {21: 600, 43: 550, 64: 500, 85: 500, 128: 500}
STEPS = range(0, 4001, 100)
ANALYSIS = {"axis": "d_e", "reference": "128, output=tied", "targets": [0.5], "common_target": 0.5, "claims": []}
SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "sweeps" / "width_ratios_cpu.yaml"
REPORT = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))["report"]  # the width study's sections


def loss(d_e: int, step: int) -> float:
    return FINAL[d_e] + 2.0 * math.exp(-step / TAU[d_e])


def params(d_e: int) -> float:
    return 1e6 + 8000 * d_e


@pytest.fixture
def width_sweep(tmp_path):
    root = tmp_path / "width"
    cells = []
    for d_e in FINAL:
        for seed in range(3):
            metrics = pretrain_metrics(9.0, 9.0, {step: loss(d_e, step) for step in STEPS}, params=params(d_e))
            metrics |= {"data/unigram_loss": {0: 7.0}}
            labels = {"d_e": str(d_e), "output": "tied", "seed": str(seed)}
            folder = make_cell(root, "pretrain", labels, metrics)
            (folder / "csv" / "version_0" / "hparams.yaml").write_text(
                yaml.safe_dump({"head": "tied_orth", "tokenizer_fingerprint": "one"})
            )
            cells.append({"id": f"pretrain/{folder.name}", "study": "pretrain", "labels": labels})
    manifest = {"name": "width", "cells": cells, "analysis": ANALYSIS, "report": REPORT}
    layout.write_json(root / layout.MANIFEST_FILE, manifest)
    return root


def read(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_source_widths_are_matched_by_share_of_the_hidden_size():
    assert [source_width(d_e, 128) for d_e in FINAL] == [128, 256, 384, 512, 768]


def test_the_pilot_rule_stops_where_the_gap_settles():
    full = [(step, loss(128, step)) for step in range(0, 8001, 100)]
    narrow = [(step, 5.16 + 2.0 * math.exp(-step / 1000)) for step in range(0, 8001, 100)]
    reading = pilot_reading(narrow, full, sigma=0.015, fraction=0.2, window=0)
    # gap(s) = 0.02 + 2 e^{-s/1000} - 2 e^{-s/500}: settled once 2 (e^{-0.8s/1000} - e^{-s/1000}) < 0.015
    change = lambda s: 2 * math.exp(-0.8 * s / 1000) - 2 * math.exp(-s / 1000)  # noqa: E731
    assert abs(reading.change) < 0.015 and change(reading.step) < 0.0155
    assert change(reading.step - 100) > 0.0145  # the step before did not settle
    assert reading.chosen == math.ceil(reading.step / 500) * 500 and reading.chosen >= reading.step
    # never before step 2,000, however flat the start
    flat = [(step, 6.0) for step in range(0, 8001, 100)]
    assert pilot_reading(flat, [(step, 5.0) for step in range(0, 8001, 100)], window=0).step == 2000


def test_a_quiet_stretch_that_does_not_last_does_not_end_the_rule():
    full = [(step, 5.0) for step in range(0, 8001, 100)]
    # flat to 3000, then closing by 0.1 per 1000 steps until 5000, flat again after
    narrow = [(step, 6.0 - 0.1 * min(max(step - 3000, 0), 2000) / 1000) for step in range(0, 8001, 100)]
    reading = pilot_reading(narrow, full, sigma=0.015, window=0)
    # at s in (3000, 5000] the change over [0.8 s, s] exceeds 0.015 once s - max(0.8 s, 3000) > 150;
    # after 5000 it shrinks again: settled from the first s with 0.1 (5000 - 0.8 s) / 1000 < 0.015
    assert reading.step == 6100 and reading.chosen == 6500


def test_a_gap_that_keeps_closing_meets_no_step():
    full = [(step, 5.0) for step in range(0, 8001, 100)]
    narrow = [(step, 6.0 - step / 4000) for step in range(0, 8001, 100)]  # 0.05 per 200 steps: never settles
    assert pilot_reading(narrow, full, sigma=0.015, window=0) is None


def test_the_gap_to_full_width_is_each_widths_loss_minus_the_full_ones(width_sweep):
    runs = find_runs(width_sweep)
    from tiedemb.experiments.claims import parse_analysis

    analysis = parse_analysis(ANALYSIS, ["pretrain"], "test")
    curves = gap_curves(collect(runs, analysis), analysis)["pretrain"]
    assert set(curves) == {"21, output=tied", "43, output=tied", "64, output=tied", "85, output=tied"}
    step, mean, low, high = curves["21, output=tied"][-1]
    assert step == 4000 and mean == pytest.approx(loss(21, 4000) - loss(128, 4000)) and low == high == mean


def test_the_report_sets_the_three_tables_beside_the_source(width_sweep):
    report = build_report(width_sweep, wandb=False, echo=lambda _: None).read_text()
    gains = {row["d_e step"]: row for row in read(width_sweep / "width_gains.csv")}
    gain = loss(21, 4000) - loss(43, 4000)  # the final losses, still a little above their limits
    assert gains["21 → 43"]["gain (nats)"] == f"{gain:+.3f} [{gain:+.3f}, {gain:+.3f}] (n = 3)"
    assert gains["21 → 43"]["source gain (points)"] == "+1.3"
    assert gains["43 → 64"]["source gain (points)"] == "+0.6" and gains["85 → 128"]["source gain (points)"] == "+0.3"
    assert gains["64 → 85"]["source gain (points)"] == "not reported"
    assert gains["85 → 128"]["share of hidden"] == "2/3 → 1"
    assert "pretrain: saturates at d_e 85 (2/3 of hidden)" in report

    cost = {row["d_e"]: row for row in read(width_sweep / "width_convergence_cost.csv")}
    # the full width reaches its own loss at half its run (step 2000) at step 2000: ratio 1
    assert float(cost["128"]["steps to target"]) == pytest.approx(2000, abs=1)
    assert cost["128"]["ratio to full width"].startswith("1.00")
    # d_e 21: 5.16 + 2 e^{-s/600} = 5.14 + 2 e^{-4}, so s = 600 ln(2 / (target - 5.16))
    target = 5.14 + 2 * math.exp(-4)
    expected = 600 * math.log(2 / (target - 5.16))
    assert float(cost["21"]["steps to target"]) == pytest.approx(expected, rel=0.01)
    assert cost["21"]["ratio to full width"].startswith(f"{expected / 2000:.1f}")
    assert cost["21"]["source"] == "d_e 128: 5.2 epochs, 1.73 of 768's"

    saved = {row["d_e"]: row for row in read(width_sweep / "width_parameters.csv")}
    assert float(saved["64"]["saved (M)"]) == pytest.approx(8000 * 64 / 1e6, abs=1e-3)
    assert saved["64"]["loss lost (nats)"].startswith("+0.005")
    assert float(saved["64"]["nats per M saved"]) == pytest.approx(0.005 / 0.512, rel=1e-2)
    assert "768 → 384 saves about 12M parameters" in saved["64"]["source"]
    assert saved["128"]["loss lost (nats)"] == "reference"
    if plots.available():
        assert (width_sweep / "gap_to_full_width.png").stat().st_size > 0
        assert "(gap_to_full_width.png)" in report


def test_the_control_table_states_tied_minus_untied_at_each_width_both_ran(width_sweep):
    for d_e in (21, 128):
        for seed in range(3):
            # the control ends 0.03 lower at d_e 21 (0.01 more for seed 2), alike at 128
            shift = (-0.03 - 0.01 * (seed == 2)) if d_e == 21 else 0.0
            curve = {step: loss(d_e, step) + shift for step in STEPS}
            labels = {"d_e": str(d_e), "output": "untied", "seed": str(seed)}
            folder = make_cell(width_sweep, "pretrain", labels, pretrain_metrics(9.0, 9.0, curve, params=params(d_e)))
            (folder / "csv" / "version_0" / "hparams.yaml").write_text(
                yaml.safe_dump({"head": "untied_orth", "tokenizer_fingerprint": "one"})
            )
    build_report(width_sweep, wandb=False, echo=lambda _: None)
    control = {row["d_e"]: row for row in read(width_sweep / "width_control.csv")}
    assert set(control) == {"21", "128"}
    assert control["21"]["tied - untied"].startswith("+0.033 [") and control["21"]["tied - untied"].endswith("(n = 3)")
    assert control["128"]["tied - untied"] == "+0.000 [+0.000, +0.000] (n = 3)"
    # the ladder's tables still hold the tied widths only
    assert {row["d_e"] for row in read(width_sweep / "width_parameters.csv")} == {str(d_e) for d_e in FINAL}


def test_a_sweep_without_a_common_target_gets_no_width_tables(width_sweep):
    manifest = layout.read_json(width_sweep / layout.MANIFEST_FILE)
    manifest["analysis"] = {key: value for key, value in ANALYSIS.items() if key != "common_target"}
    layout.write_json(width_sweep / layout.MANIFEST_FILE, manifest)
    build_report(width_sweep, wandb=False, echo=lambda _: None)
    assert not (width_sweep / "width_gains.csv").exists() and not (width_sweep / "gap_to_full_width.png").exists()


def test_width_steps_leave_out_seeds_of_another_tokenizer(width_sweep):
    path = width_sweep / "pretrain" / "d_e=21,output=tied,seed=2" / "csv" / "version_0" / "hparams.yaml"
    path.write_text(yaml.safe_dump({"head": "tied_orth", "tokenizer_fingerprint": "other"}))
    build_report(width_sweep, wandb=False, echo=lambda _: None)
    gains = {row["d_e step"]: row for row in read(width_sweep / "width_gains.csv")}
    assert "(n = 2)" in gains["21 → 43"]["gain (nats)"] and "(n = 3)" in gains["43 → 64"]["gain (nats)"]
    cost = {row["d_e"]: row for row in read(width_sweep / "width_convergence_cost.csv")}
    assert "(n = 2" in cost["21"]["ratio to full width"]


def test_the_pilot_command_prints_the_step_count(tmp_path, capsys):
    root = tmp_path / "pilot"
    for d_e, tau in ((21, 1000), (128, 500)):
        curve = {step: FINAL[d_e] + 2.0 * math.exp(-step / tau) for step in range(0, 8001, 100)}
        folder = make_cell(root, "pretrain", {"d_e": str(d_e), "seed": "0"}, pretrain_metrics(9.0, 9.0, curve))
        (folder / "csv" / "version_0" / "hparams.yaml").write_text(yaml.safe_dump({"head": "tied_orth"}))
    assert pilot_main([str(root), "--window", "0", "--cap", "10000"]) == 0
    out = capsys.readouterr().out
    reading = pilot_reading(
        [(s, FINAL[21] + 2.0 * math.exp(-s / 1000)) for s in range(0, 8001, 100)],
        [(s, loss(128, s)) for s in range(0, 8001, 100)],
        window=0,
    )
    assert f"rule met at step {reading.step}" in out and f"trainer.max_steps = {reading.chosen}" in out
    assert reading.chosen > 500
    assert pilot_main([str(root), "--window", "0", "--cap", "500"]) == 0
    assert f"trainer.max_steps = 500: the rule's {reading.chosen} is over the budget's cap" in capsys.readouterr().out


def test_the_pilot_command_needs_two_widths(tmp_path, capsys):
    folder = make_cell(tmp_path, "pretrain", {"d_e": "21", "seed": "0"}, pretrain_metrics(9.0, 9.0, {0: 7.0}))
    (folder / "csv" / "version_0" / "hparams.yaml").write_text(yaml.safe_dump({"head": "tied_orth"}))
    assert pilot_main([str(tmp_path)]) == 2
    assert "the pilot needs the narrowest and the full width" in capsys.readouterr().err


def test_a_downstream_claim_needs_the_full_width_above_the_majority_by_more_than_the_mde():
    from tiedemb.experiments.aggregate import Stat, Table
    from tiedemb.experiments.width_study import downstream_notes

    def dims(full_score: float) -> Table:
        rows = [
            {"d_e": d_e, "MRPC acc": Stat(score, 1.0, 3), "MRPC acc majority": 68.4, "MRPC acc MDE": 2.2}
            for d_e, score in ((21, 69.4), (128, full_score))
        ]
        return Table(name="embedding_dim", title="", columns=["d_e", "MRPC acc"], rows=rows)

    (noise,) = downstream_notes(dims(70.5))  # +2.1 over the majority: within the MDE of 2.2
    assert noise.startswith("no downstream signal at this scale: MRPC acc at d_e 128 is +2.1 points")
    (signal,) = downstream_notes(dims(75.0))
    assert signal.startswith("downstream signal: MRPC acc at d_e 128 beats the majority class by 6.6 points")


def test_the_gap_interpolates_the_full_width_between_its_evaluations():
    from tiedemb.experiments.width_study import gap

    full = [(0, 6.0), (100, 5.0), (200, 4.0)]
    narrow = [(50, 6.0), (150, 5.0), (250, 4.0)]  # evaluated elsewhere; 250 lies beyond the full width's last
    assert gap(narrow, full) == [(50, pytest.approx(0.5)), (150, pytest.approx(0.5))]
