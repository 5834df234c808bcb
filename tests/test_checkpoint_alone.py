"""Evaluating a checkpoint alone (``test --ckpt_path FILE`` with no config, from any folder), checkpoint
names that find nothing, and ``--optimizer``/``--lr_scheduler`` refused.

A tiny MRPC fine-tuning run (a made-up MRPC folder given relative to the run's folder, a tiny BERT,
the tiny tokenizer, pairs cut at 32 tokens) is evaluated from another folder with nothing but its
checkpoint: the model and the data settings come from the checkpoint, so the dev figures equal the
ones the run logged for that checkpoint.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bert_helpers import save_tiny_bert, write_mrpc
from tiny_runs import TINY_TIED
from tiny_vocab import TINY_VOCAB

from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.training.evaluation import (
    RUN_FOLDER_KEY,
    checkpoint_to_evaluate,
    given_keys,
    rebuilt_locations,
    run_folder,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY_PRETRAINING = [
    *TINY_TIED,
    "--trainer.logger=false",
    "--trainer.max_steps=1",
    "--trainer.enable_progress_bar=false",
]


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def exit_status(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(args)
    return exited.value.code


# --- the pieces ---------------------------------------------------------------------------------


def test_only_an_evaluating_command_line_naming_a_file_is_read_before_parsing():
    assert checkpoint_to_evaluate(["test", "--ckpt_path", "a.ckpt", "--data.batch_size=8"]) == "a.ckpt"
    assert checkpoint_to_evaluate(["predict", "--ckpt_path=a.ckpt", "--ckpt_path=b.ckpt"]) == "b.ckpt"  # the last wins
    assert checkpoint_to_evaluate(["fit", "--ckpt_path=a.ckpt"]) is None
    assert checkpoint_to_evaluate(["validate", "--ckpt_path=last"]) is None
    assert checkpoint_to_evaluate(["--config", "x.yaml", "test", "--ckpt_path=a.ckpt"]) is None
    assert given_keys(
        [
            "test",
            "--data.batch_size=8",
            "--data.init_args.max_length",
            "16",
            "--data.data_files.train=x",
            "--model.predictions_dir=out",
            "--data=tiedemb.data.GlueData",
        ],
        "data",
    ) == {"batch_size", "max_length", "data_files"}


def test_the_runs_folder_is_found_where_the_run_folder_is_now_else_where_it_started(tmp_path):
    folder = tmp_path / "moved" / "runs" / "tiedemb" / "abc" / "checkpoints"
    callbacks = {"ModelCheckpoint{'monitor': 'val/loss'}": {"dirpath": "runs/tiedemb/abc/checkpoints"}}
    assert (
        run_folder({"callbacks": callbacks, RUN_FOLDER_KEY: "/elsewhere"}, folder / "last.ckpt") == tmp_path / "moved"
    )
    # an absolute checkpoint folder says nothing of the run's folder: the one the run recorded does
    absolute = {"ModelCheckpoint{}": {"dirpath": str(folder)}}
    assert run_folder({"callbacks": absolute, RUN_FOLDER_KEY: str(tmp_path)}, folder / "last.ckpt") == tmp_path
    assert run_folder({"callbacks": absolute, RUN_FOLDER_KEY: str(tmp_path / "gone")}, folder / "last.ckpt") is None


def test_recorded_locations_are_found_from_the_runs_folder_or_named_when_missing(tmp_path, monkeypatch):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (run / "text").mkdir(parents=True)
    (run / "text" / "a.txt").write_text("the man .\n")
    (run / "tok").mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    recorded = {"train_files": ["text/*.txt"], "tokenizer": "tok", "cache_dir": "data/cache", "batch_size": 8}
    found = rebuilt_locations({**recorded, "batch_size": 4}, recorded, run)
    assert found == {"train_files": [str(run / "text" / "*.txt")], "tokenizer": str(run / "tok")}  # no cache: made here
    assert rebuilt_locations({"tokenizer": "bert-base-uncased"}, {"tokenizer": "bert-base-uncased"}, run) == {}  # hub
    assert rebuilt_locations({"tokenizer": "./mine"}, {"tokenizer": "./other"}, run) == {}  # given: the data's to check
    with pytest.raises(UserError) as missing:
        rebuilt_locations({"tokenizer": "./gone"}, {"tokenizer": "./gone"}, run)
    assert str(missing.value) == (
        f"the checkpoint's data.tokenizer './gone' (relative to the run's folder '{run}') does "
        "not exist here; pass --data.tokenizer=<folder>"
    )
    with pytest.raises(UserError) as missing:
        rebuilt_locations(
            {"data_files": {"train": "/nowhere/train.jsonl"}}, {"data_files": {"train": "/nowhere/train.jsonl"}}, run
        )
    assert str(missing.value) == (
        "the checkpoint's data.data_files '/nowhere/train.jsonl' does not exist here; pass "
        "--data.data_files='{split: <file>, ...}'"
    )


# --- a fine-tuning run evaluated from its checkpoint alone ----------------------------------------


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tiny_tokenizer_dir, one_thread) -> Path:
    """The folder of a two-step MRPC run that validated after each step, with the default loggers."""
    run = tmp_path_factory.mktemp("finetune")
    save_tiny_bert(run / "bert", vocab_size=len(TINY_VOCAB))
    write_mrpc(run / "glue")
    # relative data_dir and model.pretrained, as a user in the run's folder types them; W&B disabled in process
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(run)
        patch.setenv("WANDB_MODE", "disabled")
        main(
            [
                "fit",
                "--config",
                str(CONFIGS / "glue" / "mrpc.yaml"),
                "--model.pretrained=bert",
                f"--data.tokenizer={tiny_tokenizer_dir}",
                "--data.data_dir=glue",
                "--data.max_length=32",
                "--data.batch_size=8",
                "--data.eval_batch_size=16",
                "--model.learning_rate=1e-3",
                "--trainer.max_steps=2",
                "--trainer.val_check_interval=1",
                "--trainer.enable_progress_bar=false",
                "--trainer.enable_model_summary=false",
                "--run_name=mrpc",
            ]
        )
    return run


def last_dev_figures(run: Path) -> dict[str, float]:
    """The dev metrics of the run's last evaluation, the one its last.ckpt was written after."""
    (fit_metrics,) = run.glob("runs/*/csv/version_0/metrics.csv")  # the fit's: the run folder's first attempt
    with fit_metrics.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    last = [row for row in rows if row.get("val/accuracy")][-1]
    return {"accuracy": float(last["val/accuracy"]), "loss": float(last["val/loss"])}


@pytest.mark.end_to_end
def test_a_checkpoint_alone_is_tested_from_another_folder_with_its_own_data_settings(
    finetuned, tmp_path, monkeypatch, capsys
):
    (checkpoint,) = finetuned.glob("runs/*/checkpoints/last.ckpt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the default loggers, W&B's not started in the test process
    capsys.readouterr()
    cli = main(["test", f"--ckpt_path={checkpoint}"])
    err = capsys.readouterr().err
    logged, recorded = cli.trainer.callback_metrics, last_dev_figures(finetuned)
    assert float(logged["test/accuracy"]) == pytest.approx(recorded["accuracy"], abs=1e-6)
    assert float(logged["test/loss"]) == pytest.approx(recorded["loss"], abs=1e-6)
    assert (cli.datamodule.max_length, len(cli.datamodule.tokenizer)) == (32, len(TINY_VOCAB))  # not the config's 128
    said = [line for line in err.splitlines() if "(checkpoint" in line]
    assert said == [
        f"data.data_dir: 'glue' (checkpoint, relative to the run's folder '{finetuned}') -> '{finetuned / 'glue'}'"
    ], err[-3000:]
    assert not (tmp_path / "glue").exists()
    # its own records, here (this folder's runs/), in a run folder named after the checkpoint's run
    (records,) = (tmp_path / "runs").iterdir()
    assert records.name.startswith(f"{checkpoint.parent.parent.name}-") and (records / "config.yaml").is_file()
    assert torch.load(checkpoint, weights_only=True)[RUN_FOLDER_KEY] == str(finetuned)


@pytest.mark.end_to_end
def test_best_ckpt_of_a_run_is_tested_alone_and_its_records_join_the_run_folder(finetuned, monkeypatch, capsys):
    """``test --ckpt_path runs/<run>/checkpoints/best.ckpt`` with no other flag scores the dev split as the
    validation that made it the best did; run where the run ran, its records go into that run's folder."""
    (checkpoint,) = finetuned.glob("runs/*/checkpoints/best.ckpt")
    folder = checkpoint.parent.parent
    recorded = torch.load(checkpoint, weights_only=True)["callbacks"]
    (best_score,) = [state["best_model_score"] for name, state in recorded.items() if "val/accuracy" in name]
    monkeypatch.chdir(finetuned)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    capsys.readouterr()
    cli = main(["test", f"--ckpt_path={checkpoint.relative_to(finetuned)}"])
    assert float(cli.trainer.callback_metrics["test/accuracy"]) == pytest.approx(float(best_score), abs=1e-6)
    assert f"run folder: {checkpoint.relative_to(finetuned).parent.parent} (continued)" in capsys.readouterr().err
    assert [path.name for path in finetuned.joinpath("runs").iterdir()] == [folder.name]
    assert (folder / "csv" / "version_1" / "metrics.csv").is_file() and (folder / "config-1.yaml").is_file()
    assert json.loads((folder / "status.json").read_text())["stage"] == "test"


@pytest.mark.end_to_end
def test_a_run_folder_is_tested_from_another_folder_by_python_main_py(finetuned, tmp_path):
    """``python <project>/main.py test <project>/runs/mrpc`` prints the accuracy the run recorded as its best."""
    folder = finetuned / "runs" / "mrpc"
    recorded = torch.load(folder / "checkpoints" / "best.ckpt", weights_only=True)["callbacks"]
    (best_score,) = [state["best_model_score"] for name, state in recorded.items() if "val/accuracy" in name]
    done = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "test", str(folder)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (accuracy,) = re.findall(r"test/accuracy\W+([0-9.]+)", done.stdout)
    assert round(float(accuracy), 4) == round(float(best_score), 4)


@pytest.mark.end_to_end
def test_settings_given_on_the_command_line_override_the_recorded_ones_and_are_said(
    finetuned, tmp_path, monkeypatch, capsys
):
    (checkpoint,) = finetuned.glob("runs/*/checkpoints/last.ckpt")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    cli = main(
        [
            "test",
            f"--ckpt_path={checkpoint}",
            "--data.eval_batch_size=4",
            "--model.predictions_dir=preds",
            "--trainer.logger=false",
        ]
    )
    err = capsys.readouterr().err
    assert "data.eval_batch_size: 16 (checkpoint) -> 4 (command line)" in err.splitlines()
    assert "model.predictions_dir: null (checkpoint) -> 'preds' (command line)" in err.splitlines()
    assert cli.datamodule.eval_batch_size == 4 and (tmp_path / "preds" / "MRPC-validation.tsv").is_file()
    assert float(cli.trainer.callback_metrics["test/accuracy"]) == pytest.approx(
        last_dev_figures(finetuned)["accuracy"]
    )


@pytest.mark.end_to_end
def test_a_moved_run_folder_is_found_and_a_missing_data_folder_is_named(finetuned, tmp_path, monkeypatch, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(finetuned, moved, ignore=shutil.ignore_patterns("wandb"))
    (checkpoint,) = moved.glob("runs/*/checkpoints/last.ckpt")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    main(["test", f"--ckpt_path={checkpoint}", "--trainer.logger=false"])
    assert f"-> '{moved / 'glue'}'" in capsys.readouterr().err  # the copy's data, not the original's

    shutil.rmtree(moved / "glue")
    assert exit_status(["test", f"--ckpt_path={checkpoint}", "--trainer.logger=false"]) == 2
    err = capsys.readouterr().err
    assert error_line(err) == (
        f"error: the checkpoint's data.data_dir 'glue' (relative to the run's folder '{moved}') "
        "does not exist here; pass --data.data_dir=<folder>"
    )
    assert "(checkpoint)" not in err  # the one line, no overrides before it


# --- checkpoint names that find nothing -----------------------------------------------------------


@pytest.mark.end_to_end
@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_evaluating_last_when_there_is_no_checkpoint_is_an_error(
    subcommand, tmp_path, capsys, finetuned, tiny_tokenizer_dir
):
    empty = tmp_path / "runs"
    if subcommand == "validate":
        args = [*TINY_PRETRAINING, f"--trainer.default_root_dir={empty}"]
    else:  # test and predict are GLUE's
        args = [
            "--config",
            str(CONFIGS / "glue" / "mrpc.yaml"),
            "--model.pretrained=null",
            "--model.hidden_size=16",
            "--model.num_layers=1",
            "--model.num_heads=2",
            "--model.intermediate_size=32",
            f"--data.tokenizer={tiny_tokenizer_dir}",
            f"--data.data_dir={finetuned / 'glue'}",
            "--data.max_length=32",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={empty}",
        ]
    capsys.readouterr()
    assert exit_status([subcommand, *args, "--ckpt_path=last"]) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: --ckpt_path=last found no checkpoint of this configuration under {empty}; {subcommand} scores a "
        "trained model: pass its checkpoint file (--ckpt_path=<run>/checkpoints/<name>.ckpt), "
        "or run it where its runs are"
    )
    assert not empty.exists()


@pytest.mark.end_to_end
def test_fitting_from_last_when_there_is_none_starts_from_scratch_with_a_warning(tmp_path, capsys, one_thread):
    cli = main(["fit", *TINY_PRETRAINING, f"--trainer.default_root_dir={tmp_path}", "--ckpt_path=last"])
    assert (
        f"warning: --ckpt_path=last found no checkpoint of this configuration under {tmp_path}; starting from "
        "scratch" in capsys.readouterr().err.splitlines()
    )
    assert cli.trainer.global_step == 1
