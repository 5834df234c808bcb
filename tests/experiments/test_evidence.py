"""The report's evidence section from hand-made runs: baselines, steps to targets, paired verdicts."""

from __future__ import annotations

import csv
import statistics

import pytest
import yaml
from run_folders import make_cell, pretrain_metrics

from tiedemb.experiments import layout
from tiedemb.experiments.report_writer import build_report

UNIGRAM = 7.0
ANALYSIS = {
    "axis": "variant",
    "reference": "ref",
    "targets": [0.5, 1.0],
    "claims": [
        {
            "text": "slow is slower",
            "study": "clm",
            "levels": ["slow"],
            "metric": "steps",
            "target": 1.0,
            "expect": "higher",
            "margin": 20,
        },
        {
            "text": "same ends alike",
            "study": "clm",
            "levels": ["same"],
            "metric": "final_loss",
            "expect": "alike",
            "margin": 0.05,
        },
        {
            "text": "worse ends alike",
            "study": "clm",
            "levels": ["worse"],
            "metric": "final_loss",
            "expect": "alike",
            "margin": 0.05,
        },
    ],
}


def curve(shift_steps: float, end: float, seed: int) -> dict[int, float]:
    """A loss falling by 1 nat per 100 steps from 7.5, reaching ``end``; seeds differ by 0.3 nats."""
    values = {}
    for step in range(0, 501, 50):
        values[step] = max(end, 7.5 - (step - shift_steps) / 100) + 0.3 * seed
    return values


@pytest.fixture
def sweep_folder(tmp_path):
    root = tmp_path / "sweep"
    settings = {"ref": (0, 5.6), "slow": (100, 5.6), "same": (0, 5.61), "worse": (0, 6.2)}
    cells = []
    for variant, (shift, end) in settings.items():
        for seed in range(3):
            metrics = pretrain_metrics(9.0, 9.0, curve(shift + 3 * seed, end + 0.001 * seed * (variant == "same"), 0))
            metrics |= {"data/unigram_loss": {0: UNIGRAM}, "data/bigram_loss": {0: 6.8}}
            metrics |= {"params/total": {0: 1000.0 + 500 * (variant == "slow")}}  # slow: 500 parameters more
            folder = make_cell(
                root,
                "clm",
                {"variant": variant, "seed": str(seed)},
                metrics,
                hparams={"head": "tied", "seed": seed, "corpus_seed": 0},
            )
            (folder / "csv" / "version_0" / "hparams.yaml").write_text(
                yaml.safe_dump({"head": "tied", "seed": seed, "corpus_seed": 0, "config": {"seed_everything": seed}})
            )
            cells.append(
                {
                    "id": f"clm/variant={variant},seed={seed}",
                    "study": "clm",
                    "labels": {"variant": variant, "seed": str(seed)},
                }
            )
    layout.write_json(
        root / layout.MANIFEST_FILE,
        {"name": "made", "cells": cells, "analysis": ANALYSIS, "sweep_file": "/somewhere/on/one/machine/made.yaml"},
    )
    return root


def read(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_report_decides_the_claims_from_paired_differences(sweep_folder):
    report = build_report(sweep_folder, echo=lambda _: None).read_text()
    claims = {row["level"]: row for row in read(sweep_folder / "claims.csv")}
    # slow reaches unigram - 1 = 6.0 at step 250 (+ 3 per seed) against ref's 150: +100 steps, exactly
    assert claims["slow"]["verdict"] == "holds" and claims["slow"]["difference"].startswith("+100")
    assert claims["same"]["verdict"] == "holds"  # ends 0.01-0.012 above ref, inside ±0.05
    assert claims["worse"]["verdict"] == "does not hold"  # 0.6 above ref
    assert "/somewhere/on/one/machine" not in report  # no machine-local path in a report others read


def test_every_run_has_its_metrics_and_its_curve_in_csv(sweep_folder):
    build_report(sweep_folder, echo=lambda _: None)
    runs = read(sweep_folder / "run_metrics.csv")
    assert len(runs) == 12
    ref0 = next(row for row in runs if row["run"] == "clm/variant=ref,seed=0")
    assert float(ref0["final val loss"]) == pytest.approx(5.6)
    assert float(ref0["steps to unigram - 1"]) == pytest.approx(150.0)
    assert float(ref0["unigram"]) == UNIGRAM
    curves = read(sweep_folder / "curves.csv")
    assert len([row for row in curves if row["run"] == "clm/variant=ref,seed=0"]) == 11  # steps 0, 50, ..., 500
    baselines = read(sweep_folder / "baselines.csv")
    assert (baselines[0]["unigram"], baselines[0]["bigram"]) == ("7.0", "6.8")


def test_a_level_that_never_reaches_the_target_is_said_so(sweep_folder):
    build_report(sweep_folder, echo=lambda _: None)
    convergence = {row["variant"]: row for row in read(sweep_folder / "convergence.csv")}
    assert convergence["worse"]["steps to unigram - 1"] == "never"  # ends at 6.2, above unigram - 1
    # 6.5 is crossed between step 100 (7.5 - (100 - shift) / 100) and step 150 (the floor, 6.2), by hand:
    crossings = [100.0, 100 + 0.03 / 0.33 * 50, 100 + 0.06 / 0.36 * 50]
    mean = sum(crossings) / 3
    assert convergence["worse"]["steps to unigram - 0.5"] == f"{mean:.0f} ± {statistics.stdev(crossings):.0f}"


def test_parameters_stand_beside_the_losses(sweep_folder):
    build_report(sweep_folder, echo=lambda _: None)
    convergence = {row["variant"]: row for row in read(sweep_folder / "convergence.csv")}
    assert float(convergence["ref"]["params (M)"]) == pytest.approx(1000 / 1e6)
    assert float(convergence["slow"]["params (M)"]) == pytest.approx(1500 / 1e6)


def _set_fingerprint(folder, fingerprint):
    """A run's hparams.yaml with the tokenizer fingerprint the run logged at its start."""
    path = folder / "csv" / "version_0" / "hparams.yaml"
    hparams = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**hparams, "tokenizer_fingerprint": fingerprint}))


def test_runs_of_different_tokenizers_are_never_paired(sweep_folder):
    cells = sweep_folder / "clm"
    for folder in cells.iterdir():
        _set_fingerprint(folder, "aaaa")
    # seed 1 of "worse" read another tokenizer: its pair with ref's seed 1 is left out, by name
    _set_fingerprint(cells / "variant=worse,seed=1", "bbbb")
    build_report(sweep_folder, echo=lambda _: None)
    differences = {row["variant"]: row for row in read(sweep_folder / "paired_differences.csv")}
    assert "(n = 2)" in differences["worse"]["Δ final val loss"]
    assert "(n = 3)" in differences["same"]["Δ final val loss"]
    fingerprints = {row["run"]: row["tokenizer"] for row in read(sweep_folder / "run_metrics.csv")}
    assert fingerprints["clm/variant=worse,seed=1"] == "bbbb" and fingerprints["clm/variant=ref,seed=1"] == "aaaa"
    claims = {row["level"]: row for row in read(sweep_folder / "claims.csv")}
    assert "(n = 2)" in claims["worse"]["difference"] and "(n = 3)" in claims["same"]["difference"]
    report = (sweep_folder / "report.md").read_text()
    assert (
        "left out, their tokenizer fingerprints differ (tokenizer_fingerprint in hparams.yaml): "
        "clm/variant=worse,seed=1 with clm/variant=ref,seed=1"
    ) in report


def test_runs_of_one_tokenizer_are_all_paired(sweep_folder):
    for folder in (sweep_folder / "clm").iterdir():
        _set_fingerprint(folder, "aaaa")
    report = build_report(sweep_folder, echo=lambda _: None).read_text()
    differences = {row["variant"]: row for row in read(sweep_folder / "paired_differences.csv")}
    assert all("(n = 3)" in row["Δ final val loss"] for row in differences.values())
    assert "tokenizer fingerprints differ" not in report
