"""Plain runs' W&B name, group, tags and config come from their settings; given ones are kept."""

from __future__ import annotations

from pathlib import Path

from tiny_runs import TINY_TIED

from tiedemb.cli import main
from tiedemb.training.wandb_mode import D_E_KEY, SEED_KEY, WANDB_LOGGER, name_wandb_runs, run_labels

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def run_config(logger_args: dict, **model) -> dict:
    return {
        "seed_everything": 3,
        "model": {
            "class_path": "tiedemb.PretrainModule",
            "init_args": {"head": "tied_orth", "objective": "mlm", **model},
        },
        "data": {"init_args": {}},
        "trainer": {
            "logger": [
                {"class_path": WANDB_LOGGER, "init_args": logger_args},
                {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "runs"}},
            ]
        },
    }


def test_a_pretraining_run_is_named_grouped_and_tagged_by_head_objective_width_and_seed():
    config = run_config({"project": "tiedemb", "name": None, "tags": None, "group": None}, embedding_dim=128)
    name_wandb_runs(config)
    init = config["trainer"]["logger"][0]["init_args"]
    assert init["name"] == "tied_orth mlm d_e=128 seed=3"
    assert init["group"] == "tied_orth mlm d_e=128"  # the seeds of one setting are one group
    assert init["tags"] == ["head=tied_orth", "objective=mlm", "d_e=128", "seed=3"]
    assert init["config"] == {D_E_KEY: 128, SEED_KEY: 3}
    assert "name" not in config["trainer"]["logger"][1]["init_args"]  # only W&B loggers


def test_the_width_is_the_hidden_size_where_no_embedding_dim_is_set_and_a_glue_run_is_named_by_task():
    assert run_labels(run_config({}, hidden_size=64))["d_e"] == "64"
    glue = run_config({}, hidden_size=64)
    glue["model"]["init_args"] = {"task": "mrpc", "hidden_size": 64}
    name_wandb_runs(glue)
    assert glue["trainer"]["logger"][0]["init_args"]["name"] == "mrpc d_e=64 seed=3"


def test_a_name_group_and_tags_a_sweep_cell_or_user_gave_are_kept():
    given = {"name": "cell-7", "group": "repro_tied", "tags": ["study=clm"], "config": {"sweep": {"study": "clm"}}}
    config = run_config(dict(given), embedding_dim=32)
    name_wandb_runs(config)
    init = config["trainer"]["logger"][0]["init_args"]
    assert (init["name"], init["group"], init["tags"]) == ("cell-7", "repro_tied", ["study=clm"])
    assert init["config"] == {"sweep": {"study": "clm"}, D_E_KEY: 32, SEED_KEY: 3}


def test_the_command_line_names_the_default_w_and_b_logger(tmp_path):
    cli = main(
        [
            *TINY_TIED,
            "--seed_everything=5",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    wandb_settings = next(logger for logger in cli.config.trainer.logger if logger.class_path == WANDB_LOGGER)
    assert wandb_settings.init_args.name == "tied clm d_e=64 seed=5"
    assert wandb_settings.init_args.group == "tied clm d_e=64"
