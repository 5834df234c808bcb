"""W&B sweep files: grids, random and Bayesian searches with distributions and a metric, and the agent's call."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sweep_files import tiny_sweep

from tiedemb.errors import UserError
from tiedemb.experiments import layout
from tiedemb.experiments.emit import wandb_sweep_configs
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main

LEARNING_RATE = {"distribution": "log_uniform_values", "min": 1.0e-4, "max": 3.0e-3}
WARMUP = {"distribution": "int_uniform", "min": 1, "max": 5}


def emitted(sweep_file: Path, out: Path, **options) -> dict:
    return yaml.safe_load(wandb_sweep_configs(load_sweep(sweep_file), out, **options)["t"])


def test_a_bayes_search_has_its_metric_grid_values_and_distributions(tmp_path):
    path = tiny_sweep(
        tmp_path,
        search={
            "method": "bayes",
            "metric": {"name": "val/loss", "goal": "minimize"},
            "parameters": {"model.learning_rate": LEARNING_RATE, "model.warmup_steps": WARMUP},
            "run_cap": 12,
        },
    )
    config = emitted(path, tmp_path / "out")
    assert config["method"] == "bayes" and config["metric"] == {"name": "val/loss", "goal": "minimize"}
    assert config["parameters"] == {
        "variant": {"values": ["tied", "untied"]},
        "seed": {"values": ["0", "1"]},
        "model.learning_rate": LEARNING_RATE,
        "model.warmup_steps": WARMUP,
    }
    assert config["run_cap"] == 12 and config["command"][-1] == "${args}"


def test_the_method_and_metric_options_override_the_files(tmp_path):
    path = tiny_sweep(tmp_path)  # a plain grid: no search section
    config = emitted(path, tmp_path / "out", method="random", metric=("val/accuracy", "maximize"))
    assert config["method"] == "random" and config["metric"] == {"name": "val/accuracy", "goal": "maximize"}
    assert config["parameters"] == {"variant": {"values": ["tied", "untied"]}, "seed": {"values": ["0", "1"]}}
    grid = emitted(path, tmp_path / "out")
    assert grid["method"] == "grid" and "metric" not in grid and "run_cap" not in grid
    with pytest.raises(UserError, match="method bayes needs a metric"):
        emitted(path, tmp_path / "out", method="bayes")


def test_a_study_search_merges_with_the_files_and_its_keys_win(tmp_path):
    path = tiny_sweep(
        tmp_path,
        search={"method": "random", "parameters": {"model.learning_rate": LEARNING_RATE}},
        studies={
            "t": {"search": {"method": "bayes", "metric": "val/loss", "parameters": {"model.warmup_steps": WARMUP}}}
        },
    )
    study = load_sweep(path).study("t")
    assert study.search.method == "bayes" and study.search.metric == ("val/loss", "minimize")
    assert set(study.search.parameters) == {"model.learning_rate", "model.warmup_steps"}


@pytest.mark.parametrize(
    "search, message",
    [
        ({"parameters": {"model.learning_rate": LEARNING_RATE}}, "need method random or bayes"),
        ({"method": "bayes"}, "method bayes needs a metric"),
        ({"method": "anneal"}, "method='anneal' is not a known choice"),
        (
            {
                "method": "random",
                "parameters": {"model.learning_rate": {"distribution": "lognormal", "min": 1, "max": 2}},
            },
            "distribution='lognormal' is not one of W&B's",
        ),
        (
            {
                "method": "random",
                "parameters": {"model.learning_rate": {"distribution": "uniform", "min": 2, "max": 1}},
            },
            r"min \(2\) must be below max \(1\)",
        ),
        (
            {
                "method": "random",
                "parameters": {"model.learning_rate": {"distribution": "log_uniform_values", "min": 0, "max": 1}},
            },
            "min must be positive",
        ),
        (
            {"method": "random", "parameters": {"model.learning_rate": {"distribution": "normal", "mu": 0}}},
            "normal needs a number for sigma",
        ),
        (
            {"method": "random", "parameters": {"model.head": {"distribution": "uniform", "min": 0, "max": 1}}},
            "model.head is also a grid axis",
        ),
        ({"method": "random", "metric": {"name": "val/loss", "goal": "lower"}}, "goal='lower' is not a known choice"),
        ({"method": "random", "run_cap": 0}, "run_cap must be a positive whole number"),
    ],
)
def test_searches_w_and_b_would_refuse_are_refused_by_name(tmp_path, search, message):
    with pytest.raises(UserError, match=message):
        load_sweep(tiny_sweep(tmp_path, search=search))


def test_the_command_writes_the_search_and_the_agents_call_runs_the_drawn_values(tmp_path, fake_runs, capsys):
    calls, _ = fake_runs
    path = tiny_sweep(
        tmp_path,
        search={"method": "random", "metric": "val/loss", "parameters": {"model.learning_rate": LEARNING_RATE}},
    )
    out = tmp_path / "out"
    assert sweep_main([str(path), "--out", str(out), "--emit", "wandb", "--metric", "val/loss:minimize"]) == 0
    written = yaml.safe_load((out / "wandb_sweep.t.yaml").read_text())
    assert written["method"] == "random" and written["parameters"]["model.learning_rate"] == LEARNING_RATE
    # the agent's call: grid labels and the drawn value, which becomes an override and a label of its own folder
    assert (
        sweep_main(
            [
                str(path),
                "--out",
                str(out),
                "--study",
                "t",
                "--variant=untied",
                "--seed=1",
                "--model.learning_rate=0.00123",
            ]
        )
        == 0
    )
    assert len(calls) == 1 and "--model.learning_rate=0.00123" in calls[0]
    assert (out / "t" / "variant=untied,seed=1,learning_rate=0.00123" / layout.STATUS_FILE).is_file()
    with pytest.raises(SystemExit) as exit_status:  # only with --emit wandb
        sweep_main([str(path), "--out", str(out), "--method", "bayes"])
    assert exit_status.value.code == 2
    assert "--method and --metric shape W&B sweep files" in capsys.readouterr().err
