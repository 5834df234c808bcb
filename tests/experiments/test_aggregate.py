"""Aggregation over hand-made run folders: exact means and sample standard deviations."""

from __future__ import annotations

import math
import statistics

import pytest
from run_folders import glue_metrics, make_cell, pretrain_metrics

from tiedemb.experiments.aggregate import Stat, dev_scores, embedding_dim_table, summarise
from tiedemb.experiments.evidence import collect, convergence_table
from tiedemb.experiments.runs import find_runs


def test_summarise_uses_the_sample_standard_deviation():
    stat = summarise([1.0, 2.0, 4.0])
    assert stat.mean == pytest.approx(7 / 3)
    assert stat.std == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))
    assert stat.n == 3
    assert summarise([5.0]) == Stat(5.0, None, 1)
    assert summarise([None, float("nan")]) is None
    assert Stat(1.23456, 0.5, 2).format(2) == "1.23 ± 0.50" and Stat(1.0, None, 1).format(1) == "1.0"


@pytest.fixture
def pretraining_folder(tmp_path):
    # two variants x three seeds; the third untied seed failed and must not be averaged
    curves = {
        ("tied", "0"): (15.0, 15.4, {9: 6.0, 19: 5.0, 29: 4.0}),
        ("tied", "1"): (16.0, 15.4, {9: 6.5, 19: 5.5, 29: 4.5}),
        ("tied", "2"): (14.0, 15.4, {9: 5.5, 19: 4.5, 29: 3.9}),
        ("untied", "0"): (6.1, 6.0, {9: 5.0, 19: 4.2, 29: 3.8}),
        ("untied", "1"): (6.3, 6.0, {9: 5.2, 19: 4.6, 29: 4.0}),
    }
    for (variant, seed), (initial, predicted, val) in curves.items():
        make_cell(
            tmp_path,
            "tied",
            {"variant": variant, "seed": seed},
            pretrain_metrics(initial, predicted, val),
            hparams={"head": variant},
        )
    make_cell(
        tmp_path,
        "tied",
        {"variant": "untied", "seed": "2"},
        pretrain_metrics(99.0, 6.0, {9: 99.0}),
        hparams={"head": "untied"},
        state="failed",
        message="error: the training loss became nan",
    )
    return tmp_path


def test_the_convergence_table_gives_exact_means_and_stds_over_finished_seeds(pretraining_folder):
    runs = find_runs(pretraining_folder)
    assert len(runs) == 6 and sum(run.ok for run in runs) == 5
    rows = {row["variant"]: row for row in convergence_table(collect(runs, None), None).rows}
    tied, untied = rows["tied"], rows["untied"]
    assert tied["seeds"] == 3 and untied["seeds"] == 2  # the failed seed is not averaged
    assert tied["initial loss"].mean == pytest.approx(15.0)
    assert tied["initial loss"].std == pytest.approx(statistics.stdev([15.0, 16.0, 14.0]))
    assert untied["initial loss"].mean == pytest.approx(6.2)
    assert untied["initial loss"].std == pytest.approx(statistics.stdev([6.1, 6.3]))
    assert tied["predicted"] == Stat(15.4, 0.0, 3)
    assert tied["final val loss"].mean == pytest.approx((4.0 + 4.5 + 3.9) / 3)
    assert tied["final val loss"].std == pytest.approx(statistics.stdev([4.0, 4.5, 3.9]))


@pytest.fixture
def glue_folder(tmp_path):
    # d_e 128 and 256, two seeds each, MRPC; parameters grow by 2M from 128 to 256
    settings = {
        ("128", "0"): ({1: 0.70, 3: 0.80, 5: 0.78}, {1: 0.8, 3: 0.86, 5: 0.85}, 1.5),
        ("128", "1"): ({1: 0.72, 3: 0.76, 5: 0.79}, {1: 0.81, 3: 0.84, 5: 0.87}, 2.5),
        ("256", "0"): ({1: 0.82, 3: 0.83, 5: 0.81}, {1: 0.88, 3: 0.89, 5: 0.87}, 0.5),
        ("256", "1"): ({1: 0.80, 3: 0.84, 5: 0.84}, {1: 0.86, 3: 0.90, 5: 0.91}, 1.0),
    }
    for (dim, seed), (accuracy, f1, epochs) in settings.items():
        total = 10e6 if dim == "128" else 12e6
        make_cell(
            tmp_path,
            "mrpc",
            {"d_e": dim, "seed": seed},
            glue_metrics(accuracy, f1, epochs, total, total / 5),
            hparams={"task": "mrpc", "num_labels": 2, "embedding_dim": int(dim)},
        )
    return tmp_path


def test_the_table_gives_each_score_beside_always_answering_the_most_frequent_label(tmp_path):
    for dim, logged in (("128", True), ("256", False)):  # the d_e 256 runs predate the floor
        floor = {"data/majority/accuracy": {0: 0.684}, "data/majority/f1": {0: 0.812}} if logged else {}
        make_cell(
            tmp_path,
            "mrpc",
            {"d_e": dim, "seed": "0"},
            {**glue_metrics({1: 0.70}, {1: 0.8}, 1.0, 1e6, 2e5), **floor},
            hparams={"task": "mrpc", "num_labels": 2, "embedding_dim": int(dim)},
        )
    table = embedding_dim_table(find_runs(tmp_path))
    logged, older = table.rows
    assert logged["MRPC acc majority"] == pytest.approx(68.4) and logged["MRPC F1 majority"] == pytest.approx(81.2)
    assert older["MRPC acc majority"] is None
    assert table.columns.index("MRPC acc majority") == table.columns.index("MRPC F1") + 1


def test_dev_scores_are_read_at_the_best_main_metric(glue_folder):
    runs = {run.id: run for run in find_runs(glue_folder)}
    scores = dev_scores(runs["mrpc/d_e=128,seed=1"])
    assert scores["accuracy"] == 0.79 and scores["f1"] == 0.87  # step 5, where accuracy peaked


def test_embedding_dim_table_gives_exact_means_and_stds(glue_folder):
    table = embedding_dim_table(find_runs(glue_folder))
    small, large = table.rows
    assert (small["d_e"], large["d_e"]) == (128, 256)
    assert small["MRPC acc"].mean == pytest.approx(100 * (0.80 + 0.79) / 2)
    assert small["MRPC acc"].std == pytest.approx(100 * statistics.stdev([0.80, 0.79]))
    assert large["MRPC acc"].mean == pytest.approx(100 * (0.83 + 0.84) / 2)  # the first best of seed 1 is step 3
    assert large["MRPC F1"].mean == pytest.approx(100 * (0.89 + 0.90) / 2)
    assert small["total params (M)"] == pytest.approx(10.0) and small["embedding share (%)"] == pytest.approx(20.0)


def test_confidence_interval_uses_students_t():
    from tiedemb.experiments.aggregate import Interval

    # two seeds: std sqrt(2), standard error 1, so the half-width is t_0.975 at 1 d.f.
    assert summarise([0.0, 2.0]).ci95 == pytest.approx(12.706, rel=1e-4)
    stat = summarise([70.0, 72.0, 74.0])  # mean 72, sample std 2; t_0.975 = 4.303 at three seeds
    assert stat.ci95 == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-4)
    assert Interval(stat).format(2) == f"[{72 - stat.ci95:.2f}, {72 + stat.ci95:.2f}]"
    assert summarise([1.0]).ci95 is None and Interval(summarise([1.0])).format() == "–"


def test_routes_stand_side_by_side_with_final_beside_best(tmp_path):
    """Two routes to the same widths give one row per (route, d_e); the final dev evaluation is
    reported beside the best one, and the interval beside the mean."""
    curves = {"0": {1: 0.70, 2: 0.80, 3: 0.76}, "1": {1: 0.72, 2: 0.78, 3: 0.78}}
    for route, shift in (("pretrained", 0.0), ("svd", -0.05)):
        for seed, curve in curves.items():
            accuracy = {step: value + shift for step, value in curve.items()}
            make_cell(
                tmp_path,
                route,
                {"d_e": "64", "seed": seed},
                glue_metrics(accuracy, dict(accuracy), 1.0, 1e6, 1e5),
                hparams={"task": "mrpc", "num_labels": 2, "embedding_dim": 64},
            )
    table = embedding_dim_table(find_runs(tmp_path))
    assert table.columns[0] == "route" and [row["route"] for row in table.rows] == ["pretrained", "svd"]
    pretrained, svd = table.rows
    assert pretrained["MRPC acc"].mean == pytest.approx(100 * (0.80 + 0.78) / 2)  # best of each run
    assert pretrained["MRPC acc final"].mean == pytest.approx(100 * (0.76 + 0.78) / 2)  # last evaluation
    assert svd["MRPC acc"].mean == pytest.approx(pretrained["MRPC acc"].mean - 5.0)
    assert pretrained["MRPC acc 95% CI"].stat is pretrained["MRPC acc"]


def test_epochs_to_converge_on_a_hand_made_dev_curve():
    from tiedemb.modules.glue import epochs_to_converge

    # best 0.84 at epoch 3.0; 99% of it is 0.8316, first reached at 2.25 (0.835), not at the best
    curve = [(0.25, 0.68), (0.5, 0.70), (1.0, 0.79), (2.0, 0.83), (2.25, 0.835), (3.0, 0.84), (4.0, 0.82)]
    assert epochs_to_converge(curve) == 2.25
    assert epochs_to_converge([(1.0, 0.5), (2.0, 0.6)]) == 2.0  # still rising: the last evaluation
    assert epochs_to_converge([]) is None


def test_an_attempt_stopped_before_its_first_metrics_is_passed_over(tmp_path):
    """A cell killed before the CSV logger's first flush leaves version_0 with hparams.yaml only;
    the resumed attempt's version_1 holds the metrics."""
    folder = make_cell(
        tmp_path,
        "mrpc",
        {"d_e": "64", "seed": "1"},
        glue_metrics({10: 0.70, 20: 0.72}, {10: 0.80, 20: 0.81}, 1.0, 1e6, 1e5),
        version=1,
    )
    (folder / "csv" / "version_0").mkdir()
    (folder / "csv" / "version_0" / "hparams.yaml").write_text("task: mrpc\n", encoding="utf-8")
    (run,) = find_runs(tmp_path)
    assert run.metrics["val/accuracy"] == {10: 0.70, 20: 0.72}
