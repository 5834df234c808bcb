"""TIEDEMB_WANDB_LOG_MODEL: checkpoints as W&B artifacts (offline here: recorded in the run's transaction log)."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonargparse import Namespace
from tiny_runs import TINY_TIED
from wandb_records import read_wandb_run

from tiedemb.errors import UserError
from tiedemb.training.wandb_checkpoints import LOG_MODEL_ENV, apply_log_model, log_model_setting

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def fit(folder: Path, log_model: str | None) -> subprocess.CompletedProcess:
    # Its own W&B service and its own staging folder for artifact files, as in test_wandb_resume.
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_") and key != LOG_MODEL_ENV}
    env.update(WANDB_MODE="offline", WANDB_DATA_DIR=str(folder / "wandb-data"), OMP_NUM_THREADS="1")
    if log_model is not None:
        env[LOG_MODEL_ENV] = log_model
    command = [
        sys.executable,
        str(ROOT / "main.py"),
        "fit",
        *TINY_TIED,
        "--trainer.enable_progress_bar=false",
        "--trainer.max_steps=3",
    ]
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def logged_models(folder: Path):
    (log,) = folder.glob("runs/*/wandb/offline-run-*/run-*.wandb")
    run = read_wandb_run(log)
    return run, [artifact for artifact in run.artifacts if artifact.type == "model"]


def md5_base64(path: Path) -> str:
    return base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode()


@pytest.mark.end_to_end
def test_the_switch_logs_the_best_and_the_last_checkpoint_as_model_artifacts(tmp_path):
    fit(tmp_path, "true")
    run, models = logged_models(tmp_path)
    assert {artifact.name for artifact in models} == {f"model-{run.run_id}"}
    (best_file,) = [
        path for path in tmp_path.glob("runs/*/checkpoints/*.ckpt") if path.name not in ("last.ckpt", "best.ckpt")
    ]
    assert (best_file.parent / "best.ckpt").samefile(best_file)  # the stable name, the same file
    last_file = best_file.with_name("last.ckpt")
    by_file = {artifact.metadata["original_filename"]: artifact for artifact in models}
    assert set(by_file) == {best_file.name, last_file.name}
    # the artifact holds the very file the run wrote: same MD5, same size
    for path in (best_file, last_file):
        assert by_file[path.name].files == {"model.ckpt": (md5_base64(path), path.stat().st_size)}
    assert sorted(by_file[best_file.name].aliases) == ["best", "latest"]  # W&B keeps no order among aliases
    (config,) = tmp_path.glob("runs/**/config.yaml")
    loggers = yaml.safe_load(config.read_text())["trainer"]["logger"]
    assert [logger["init_args"].get("log_model") for logger in loggers] == [True, None]  # recorded, W&B's only


@pytest.mark.end_to_end
@pytest.mark.parametrize("log_model", [None, "false"])
def test_without_the_switch_no_checkpoint_is_logged(tmp_path, log_model):
    fit(tmp_path, log_model)
    run, models = logged_models(tmp_path)
    assert run.history and models == []  # the run logged its metrics, but no checkpoint
    assert list(tmp_path.glob("runs/**/checkpoints/last.ckpt"))


def wandb_and_csv(**wandb_args) -> Namespace:
    return Namespace(
        logger=[
            Namespace(
                class_path="lightning.pytorch.loggers.WandbLogger", init_args=Namespace(project="p", **wandb_args)
            ),
            Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace(save_dir="runs")),
        ]
    )


def test_the_switch_sets_every_wandb_logger_and_keeps_a_configs_own_value(monkeypatch):
    monkeypatch.setenv(LOG_MODEL_ENV, "all")
    trainer = wandb_and_csv(log_model=False)
    assert apply_log_model(trainer) == 1
    assert trainer.logger[0].init_args.log_model == "all" and "log_model" not in trainer.logger[1].init_args
    single = Namespace(logger=Namespace(class_path="WandbLogger", init_args=Namespace(log_model=None)))
    assert apply_log_model(single) == 1 and single.logger.init_args.log_model == "all"
    monkeypatch.setenv(LOG_MODEL_ENV, "true")
    own = wandb_and_csv(log_model="all")
    assert apply_log_model(own) == 0 and own.logger[0].init_args.log_model == "all"
    assert apply_log_model(Namespace(logger=False)) == 0  # logging off: nothing to set
    monkeypatch.delenv(LOG_MODEL_ENV)
    untouched = wandb_and_csv(log_model=False)
    assert apply_log_model(untouched) == 0 and untouched.logger[0].init_args.log_model is False


def test_an_unknown_value_is_a_user_error(monkeypatch):
    monkeypatch.setenv(LOG_MODEL_ENV, "sometimes")
    with pytest.raises(UserError, match="TIEDEMB_WANDB_LOG_MODEL='sometimes' is not one of true, all, false"):
        log_model_setting()
