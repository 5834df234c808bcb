"""A study is a file: a sweep file declares its report's sections, and a new study needs no code."""

from __future__ import annotations

import csv
import re

import pytest
from run_folders import make_cell, pretrain_metrics
from sweep_files import CONFIGS, write_sweep

from tiedemb.errors import UserError
from tiedemb.experiments.cells import write_manifest
from tiedemb.experiments.report_writer import build_report
from tiedemb.experiments.sections import SECTIONS
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main

# A study of three heads, the third a family the shipped sweeps never compare, with a claim of its own.
NEW_STUDY = {
    "name": "heads",
    "configs": [str(CONFIGS / "tied.yaml"), str(CONFIGS / "scale" / "tiny.yaml")],
    "grid": {"model.head": ["tied", "untied", "tied_scaled_init"], "seed_everything": [0, 1, 2]},
    "analysis": {
        "axis": "variant",
        "reference": "tied",
        "claims": [
            {
                "text": "scaling the tied head lowers the final loss",
                "study": "heads",
                "levels": ["tied_scaled_init"],
                "metric": "final_loss",
                "expect": "lower",
                "margin": 0.1,
            }
        ],
    },
    "report": ["convergence", "claims", {"kind": "runs_not_averaged"}],
}
FINAL = {"tied": 5.0, "untied": 4.9, "tied_scaled_init": 4.5}


def read(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_a_new_study_is_one_sweep_file_and_its_report_has_the_sections_it_declares(tmp_path):
    sweep = load_sweep(write_sweep(tmp_path, NEW_STUDY))
    out = tmp_path / "out"
    write_manifest(sweep, out)
    for cell in sweep.cells:  # each cell's run, as the sweep would leave it
        final = FINAL[cell.labels["variant"]] + 0.01 * int(cell.labels["seed"])
        make_cell(out, cell.study, cell.labels, pretrain_metrics(9.0, 9.0, {10: 7.0, 20: final}))
    build_report(out, echo=lambda _: None)

    text = (out / "report.md").read_text(encoding="utf-8")
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == [
        "# Report: heads",
        "## Evidence: baselines, convergence, paired differences and verdicts",
        "### Convergence",
        "### Claims and verdicts",
        "## 1. Runs not averaged",
    ]
    (claim,) = read(out / "claims.csv")
    assert claim["level"] == "tied_scaled_init" and claim["difference"].startswith("-0.500 [")
    assert claim["verdict"].startswith("holds"), claim
    assert {row["variant"] for row in read(out / "convergence.csv")} == set(FINAL)
    assert "](loss_curves.png)" in text
    # what it does not declare is not made; what every report has is
    assert not (out / "baselines.csv").exists() and not (out / "embedding_dim.csv").exists()
    assert {"run_metrics.csv", "curves.csv"} <= {path.name for path in out.iterdir()}


def test_a_sweep_file_without_a_report_gets_every_section_that_needs_no_width_analysis(tmp_path):
    content = {key: value for key, value in NEW_STUDY.items() if key != "report"}
    sweep = load_sweep(write_sweep(tmp_path, content))
    assert sweep.report is None
    out = tmp_path / "out"
    write_manifest(sweep, out)
    for cell in sweep.cells:
        make_cell(out, cell.study, cell.labels, pretrain_metrics(9.0, 9.0, {10: 7.0, 20: 5.0}))
    build_report(out, echo=lambda _: None)
    text = (out / "report.md").read_text(encoding="utf-8")
    chapters = [line for line in text.splitlines() if line.startswith("## ")]
    assert chapters[1:] == ["## 1. Embedding dimension", "## 2. Runs not averaged"]
    assert "### Baselines" in text and "### Claims and verdicts" in text


@pytest.mark.parametrize(
    ("report", "message"),
    [
        (["claims", "loss_table"], "report[1]: unknown section kind 'loss_table'; the kinds are baselines, "),
        (["claim"], "report[0]: unknown section kind 'claim'; did you mean claims? the kinds are baselines, "),
        (["tied_embeddings"], "report[0]: unknown section kind 'tied_embeddings'; "),
        ([{"kind": "embedding_dim", "downstream": True}], "report[0]: expected a section kind, got {'kind': "),
        (["width_gains"], "report[0]: width_gains compares widths at analysis.common_target, which the file"),
        ("claims", "report must be a list of section kinds"),
    ],
)
def test_a_mistaken_report_is_named_in_one_line(tmp_path, capsys, report, message):
    path = write_sweep(tmp_path, {**NEW_STUDY, "report": report})
    with pytest.raises(UserError, match="^sweep file .*" + re.escape(message)):
        load_sweep(path)
    assert sweep_main([str(path), "--out", str(tmp_path / "out"), "--list"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line and not (tmp_path / "out").exists()


def test_every_shipped_sweep_declares_a_report_of_known_sections():
    for path in sorted((CONFIGS / "sweeps").glob("*.yaml")):
        sweep = load_sweep(path)
        assert sweep.report and all(section["kind"] in SECTIONS for section in sweep.report), path.name
