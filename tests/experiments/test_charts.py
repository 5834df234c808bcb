"""The report's W&B charts: the same series as its PNG figures, as plain data."""

from __future__ import annotations

import pytest
from run_folders import make_cell, pretrain_metrics

from tiedemb.experiments.aggregate import summarise
from tiedemb.experiments.charts import dev_score_charts, effective_rank_chart, loss_charts
from tiedemb.experiments.plots import loss_panels
from tiedemb.experiments.runs import find_runs


def test_loss_charts_hold_each_variants_mean_curve_from_the_initial_loss(tmp_path):
    for d_e in ("32", "64"):
        for seed, shift in (("0", 0.0), ("1", 0.4)):
            make_cell(
                tmp_path,
                "tied",
                {"variant": "tied", "d_e": d_e, "seed": seed},
                pretrain_metrics(15.0 + shift, 15.0, {10: 5.0 + shift}),
                hparams={"head": "tied"},
            )
    charts = loss_charts(loss_panels(find_runs(tmp_path)))
    assert set(charts) == {"loss_curves/d_e=32", "loss_curves/d_e=64"}  # one chart per panel
    chart = charts["loss_curves/d_e=64"]
    assert chart.xname == "step" and chart.title == "validation loss: d_e = 64"
    xs, ys = chart.lines["tied"]
    assert xs == [0.0, 10.0] and ys == pytest.approx([15.2, 5.2])


def test_dev_score_and_rank_charts_have_one_line_per_route_and_study():
    rows = [
        {"d_e": 32, "route": "pretrained", "accuracy": summarise([70.0, 72.0])},
        {"d_e": 64, "route": "pretrained", "accuracy": summarise([74.0])},
        {"d_e": 32, "route": "svd", "accuracy": summarise([60.0])},
    ]
    charts = dev_score_charts(rows, ["accuracy", "f1"])
    assert set(charts) == {"dev_score_vs_de/accuracy"}  # no f1 values: no chart
    assert charts["dev_score_vs_de/accuracy"].lines == {
        "pretrained": ([32.0, 64.0], [71.0, 74.0]),
        "svd": ([32.0], [60.0]),
    }
    rank = effective_rank_chart({"pretrained (tied)": {64: [10.0, 12.0], 32: [5.0]}})
    assert rank["effective_rank_vs_de"].lines == {"pretrained (tied)": ([32.0, 64.0], [5.0, 11.0])}
    assert effective_rank_chart({}) == {}
