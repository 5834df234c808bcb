"""The width study's evidence from hand-made runs: the gap to full width and the
three tables beside the source's figures (tiedemb.experiments.width_study)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import yaml
from run_folders import make_cell, pretrain_metrics

from tiedemb.errors import UserError
from tiedemb.experiments import layout, plots
from tiedemb.experiments.evidence import collect
from tiedemb.experiments.report_writer import build_report
from tiedemb.experiments.runs import find_runs
from tiedemb.experiments.width_study import gap_curves, source_width

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


def test_the_gap_to_full_width_is_each_widths_loss_minus_the_full_ones(width_sweep):
    runs = find_runs(width_sweep)
    from tiedemb.experiments.claims import parse_analysis

    analysis = parse_analysis(ANALYSIS, ["pretrain"], "test")
    curves = gap_curves(collect(runs, analysis), analysis)["pretrain"]
    assert set(curves) == {"21, output=tied", "43, output=tied", "64, output=tied", "85, output=tied"}
    step, mean, low, high = curves["21, output=tied"][-1]
    assert step == 4000 and mean == pytest.approx(loss(21, 4000) - loss(128, 4000)) and low == high == mean


def test_the_report_sets_the_three_tables_beside_the_source(width_sweep):
    report = build_report(width_sweep, echo=lambda _: None).read_text()
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
    assert "768 → 384 saves about 12M parameters" in saved["64"]["source"]
    assert saved["128"]["loss lost (nats)"] == "reference"
    if plots.pyplot() is not None:
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
    build_report(width_sweep, echo=lambda _: None)
    control = {row["d_e"]: row for row in read(width_sweep / "width_control.csv")}
    assert set(control) == {"21", "128"}
    assert control["21"]["tied - untied"].startswith("+0.033 [") and control["21"]["tied - untied"].endswith("(n = 3)")
    assert control["128"]["tied - untied"] == "+0.000 [+0.000, +0.000] (n = 3)"
    # the ladder's tables still hold the tied widths only
    assert {row["d_e"] for row in read(width_sweep / "width_parameters.csv")} == {str(d_e) for d_e in FINAL}


def test_width_sections_without_a_common_target_are_refused_before_anything_is_written(width_sweep):
    manifest = layout.read_json(width_sweep / layout.MANIFEST_FILE)
    manifest["analysis"] = {key: value for key, value in ANALYSIS.items() if key != "common_target"}
    layout.write_json(width_sweep / layout.MANIFEST_FILE, manifest)
    with pytest.raises(UserError, match="width_control compares widths at analysis.common_target"):
        build_report(width_sweep, echo=lambda _: None)
    assert not list(width_sweep.glob("*.csv")) and not (width_sweep / "report.md").exists()


def test_width_steps_leave_out_seeds_of_another_tokenizer(width_sweep):
    path = width_sweep / "pretrain" / "d_e=21,output=tied,seed=2" / "csv" / "version_0" / "hparams.yaml"
    path.write_text(yaml.safe_dump({"head": "tied_orth", "tokenizer_fingerprint": "other"}))
    build_report(width_sweep, echo=lambda _: None)
    gains = {row["d_e step"]: row for row in read(width_sweep / "width_gains.csv")}
    assert "(n = 2)" in gains["21 → 43"]["gain (nats)"] and "(n = 3)" in gains["43 → 64"]["gain (nats)"]
    cost = {row["d_e"]: row for row in read(width_sweep / "width_convergence_cost.csv")}
    assert "(n = 2" in cost["21"]["ratio to full width"]


def test_the_gap_interpolates_the_full_width_between_its_evaluations():
    from tiedemb.experiments.width_study import gap

    full = [(0, 6.0), (100, 5.0), (200, 4.0)]
    narrow = [(50, 6.0), (150, 5.0), (250, 4.0)]  # evaluated elsewhere; 250 lies beyond the full width's last
    assert gap(narrow, full) == [(50, pytest.approx(0.5)), (150, pytest.approx(0.5))]
