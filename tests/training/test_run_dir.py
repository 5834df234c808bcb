"""One folder per run (tiedemb.training.run_dir): its name, collisions, continuing one, DDP ranks > 0
taking rank 0's, the loggers that write into it, best.ckpt; and the report reading run folders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.experiments import layout
from tiedemb.experiments.runs import find_runs
from tiedemb.training.checkpoints import keep_best_name
from tiedemb.training.run_dir import (
    BEST_NAME,
    PARENT_RUN_DIR,
    base_name,
    choose_run_dir,
    run_dir_of_checkpoint,
    run_dir_of_parent,
    share_run_dir,
    writes_in_run_dir,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
TINY = ["--config", str(CONFIGS / "tied_orth.yaml"), "--config", str(CONFIGS / "scale" / "tiny.yaml")]
QUIET = ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


# --------------------------------------------------------------------------- names and folders


def test_the_first_config_names_the_run_and_an_id_keeps_runs_apart(tmp_path):
    assert base_name(["configs/tied_orth.yaml", "configs/scale/tiny.yaml"]) == "tied_orth"
    first, continued = choose_run_dir(tmp_path, None, "tied_orth")
    first.mkdir()
    second, _ = choose_run_dir(tmp_path, None, "tied_orth")
    assert not continued and first.parent == second.parent == tmp_path and first != second
    assert first.name.startswith("tied_orth-") and len(first.name) == len("tied_orth-") + 8


def test_a_run_name_whose_folder_holds_something_is_refused_in_one_line(tmp_path):
    (tmp_path / "mine").mkdir()
    assert choose_run_dir(tmp_path, "mine", "x") == (tmp_path / "mine", False)  # empty: nothing to merge with
    (tmp_path / "mine" / "config.yaml").write_text("{}\n")
    with pytest.raises(UserError) as refused:
        choose_run_dir(tmp_path, "mine", "x")
    message = str(refused.value)
    assert "\n" not in message and "choose another --run_name" in message
    assert "--ckpt_path" not in message  # no checkpoint there: none is named
    checkpoint = tmp_path / "mine" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"")
    with pytest.raises(UserError) as refused:
        choose_run_dir(tmp_path, "mine", "x")
    assert str(refused.value).endswith(f"choose another --run_name, or continue that run with --ckpt_path={checkpoint}")
    # continuing that run from its own checkpoint is no collision
    assert choose_run_dir(tmp_path, "mine", "x", checkpoint) == (tmp_path / "mine", True)
    for bad in ("a/b", "..", ".hidden", ""):
        with pytest.raises(UserError, match="is not a folder name"):
            choose_run_dir(tmp_path, bad, "x")


def test_a_checkpoint_inside_a_run_folder_under_the_root_continues_that_folder(tmp_path, monkeypatch):
    inside = tmp_path / "runs" / "tied-0123abcd" / "checkpoints" / "last.ckpt"
    assert run_dir_of_checkpoint(inside, tmp_path / "runs") == tmp_path / "runs" / "tied-0123abcd"
    assert choose_run_dir(tmp_path / "runs", None, "tied", inside) == (tmp_path / "runs" / "tied-0123abcd", True)
    # a root that is itself the run folder (a sweep cell, --run_name=.)
    assert run_dir_of_checkpoint(tmp_path / "cell" / "checkpoints" / "x.ckpt", tmp_path / "cell") == tmp_path / "cell"
    # the layout before run folders, and another root's run: a new folder here
    old = tmp_path / "runs" / "tiedemb" / "abc" / "checkpoints" / "last.ckpt"
    assert run_dir_of_checkpoint(old, tmp_path / "runs") is None
    assert run_dir_of_checkpoint(inside, tmp_path / "elsewhere") is None
    # a relative root stays relative: Lightning compares a resumed checkpoint folder as written
    monkeypatch.chdir(tmp_path)
    assert run_dir_of_checkpoint("runs/tied-0123abcd/checkpoints/last.ckpt", "runs") == Path("runs/tied-0123abcd")


def test_a_ddp_rank_started_by_the_run_takes_its_folder_and_no_other_process_does(tmp_path):
    environ: dict[str, str] = {}
    share_run_dir(tmp_path / "runs" / "x", environ)
    assert environ[PARENT_RUN_DIR] == f"{os.getpid()}:{tmp_path / 'runs' / 'x'}"
    # as a child of this process sees it: its parent's pid, a local rank above 0
    child = {PARENT_RUN_DIR: f"{os.getppid()}:{tmp_path / 'runs' / 'x'}", "LOCAL_RANK": "1"}
    assert run_dir_of_parent(child) == tmp_path / "runs" / "x"
    assert run_dir_of_parent({**child, "LOCAL_RANK": "0"}) is None  # rank 0 chooses its own
    assert run_dir_of_parent({**child, PARENT_RUN_DIR: f"1:{tmp_path}"}) is None  # not started by that process
    assert run_dir_of_parent({"LOCAL_RANK": "1"}) is None


def test_loggers_saving_to_the_default_or_the_root_write_into_the_run_folder(tmp_path):
    assert writes_in_run_dir(".", tmp_path) and writes_in_run_dir(None, tmp_path)
    assert writes_in_run_dir(str(tmp_path), tmp_path)
    assert not writes_in_run_dir(str(tmp_path / "elsewhere"), tmp_path)


def test_best_ckpt_is_the_best_checkpoint_the_callback_names_else_the_newest_state(tmp_path):
    state = {"dirpath": str(tmp_path), "best_model_path": ""}
    last = tmp_path / "last.ckpt"
    last.write_bytes(b"step 2")
    keep_best_name({"callbacks": {"ModelCheckpoint{}": state}}, last)  # nothing scored yet
    assert (tmp_path / BEST_NAME).read_bytes() == b"step 2"
    scored = tmp_path / "step3-val_loss1.0.ckpt"
    scored.write_bytes(b"step 3")
    keep_best_name({"callbacks": {"ModelCheckpoint{}": {**state, "best_model_path": str(scored)}}}, scored)
    assert (tmp_path / BEST_NAME).read_bytes() == b"step 3"
    last.write_bytes(b"step 4")  # a later, worse state: best.ckpt stays the scored one
    keep_best_name({"callbacks": {"ModelCheckpoint{}": {**state, "best_model_path": str(scored)}}}, last)
    assert (tmp_path / BEST_NAME).read_bytes() == b"step 3"
    scored.unlink()  # top-k rotation deletes the descriptive name: best.ckpt keeps the file
    assert (tmp_path / BEST_NAME).read_bytes() == b"step 3"
    assert sorted(path.name for path in tmp_path.iterdir()) == [BEST_NAME, "last.ckpt"]  # nothing staged left


# --------------------------------------------------------------------------- the command line


@pytest.mark.end_to_end
def test_a_run_name_in_use_is_refused_and_its_run_untouched(tmp_path, capsys):
    args = ["fit", *TINY, "--trainer.max_steps=1", *QUIET, f"--trainer.default_root_dir={tmp_path}"]
    cli = main([*args, "--run_name=mine"])
    assert Path(cli.run_dir) == tmp_path / "mine"
    before = {path: path.stat().st_mtime_ns for path in (tmp_path / "mine").rglob("*")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--run_name=mine"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err and len(errors) == 1, err
    assert errors[0].startswith(f"error: run folder {str(tmp_path / 'mine')!r} already exists")
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "mine").rglob("*")} == before
    assert [path.name for path in tmp_path.iterdir()] == ["mine"]


@pytest.mark.end_to_end
def test_a_config_that_lists_no_checkpoint_callback_gets_lightnings_own_in_the_run_folder(tmp_path):
    """Callbacks replaced by a list without a ModelCheckpoint: Lightning's default one, given the run's
    checkpoints folder before the Trainer is built (not Lightning's <save_dir>/<name>/<version>/)."""
    args = ["fit", *TINY, *QUIET, f"--trainer.default_root_dir={tmp_path}", "--run_name=own"]
    cli = main([*args, "--trainer.max_steps=2", "--trainer.callbacks=[]"])
    (callback,) = cli.trainer.checkpoint_callbacks
    assert type(callback) is ModelCheckpoint and callback.dirpath == str(tmp_path / "own" / "checkpoints")
    off = [*args[:-1], "--run_name=off", "--trainer.max_steps=1", "--trainer.callbacks=[]"]
    assert main([*off, "--trainer.enable_checkpointing=false"]).trainer.checkpoint_callbacks == []


@pytest.mark.end_to_end
def test_last_finds_a_checkpoint_of_the_layout_before_run_folders_and_goes_on_in_a_new_folder(tmp_path, capsys):
    """Before run folders a run's checkpoints were in <root>/tiedemb/<W&B id>/checkpoints: --ckpt_path=last
    still resumes from there, into a run folder of its own (the old folder is left as it was)."""
    args = ["fit", *TINY, *QUIET, f"--trainer.default_root_dir={tmp_path}"]
    first = Path(main([*args, "--trainer.max_steps=2"]).run_dir)
    old = tmp_path / "tiedemb" / "abc" / "checkpoints"
    old.mkdir(parents=True)
    (first / "checkpoints" / "last.ckpt").rename(old / "last.ckpt")
    shutil.rmtree(first)
    capsys.readouterr()
    resumed = main([*args, "--trainer.max_steps=3", "--ckpt_path=last"])
    err = capsys.readouterr().err
    assert f"resuming from {(old / 'last.ckpt').resolve()}" in err
    new = Path(resumed.run_dir)
    assert new.parent == tmp_path and new.name.startswith("tied_orth-") and "(continued)" not in err
    assert torch.load(new / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    assert torch.load(old / "last.ckpt", weights_only=True)["global_step"] == 2


def run_main(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python main.py ...`` as a user runs it: default loggers, W&B offline (no credentials)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    home = cwd.parent / "home"  # W&B keeps its settings and cache under HOME
    env.update(HOME=str(home), NETRC=str(home / "no-netrc"), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


@pytest.mark.end_to_end
def test_a_fit_with_the_default_loggers_leaves_one_run_folder_and_a_resume_continues_it(tmp_path):
    """Config, last and best checkpoints, CSV metrics, the W&B offline run and the status in one folder
    under --trainer.default_root_dir; nothing under ./runs; --ckpt_path=last goes on in that folder."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    common = ["fit", *TINY, f"--trainer.default_root_dir={out}", "--trainer.enable_progress_bar=false"]
    first = run_main(work, *common, "--trainer.max_steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    (run,) = out.iterdir()
    assert run.name.startswith("tied_orth-") and f"run folder: {run}" in first.stderr
    assert (run / "config.yaml").is_file()
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "checkpoints" / "best.ckpt").is_file()
    assert (run / "csv" / "version_0" / "metrics.csv").is_file()
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert not (work / "runs").exists() and list(work.iterdir()) == []

    resumed = run_main(work, *common, "--trainer.max_steps=3", "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"run folder: {run} (continued)" in resumed.stderr
    assert list(out.iterdir()) == [run]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    # validated at step 3: best.ckpt is now the scored checkpoint, beside its descriptive name
    best = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["global_step"] == 3 and len(list((run / "checkpoints").glob("step3-*.ckpt"))) == 1
    assert len(list((run / "wandb").glob("offline-run-*"))) == 2
    assert (run / "csv" / "version_1" / "metrics.csv").is_file() and (run / "config-1.yaml").is_file()
    (found,) = find_runs(out)  # the report: one run in two attempts
    assert (found.id, found.state, max(step for step, _ in found.series("train/loss"))) == (run.name, "finished", 2)
    assert not (work / "runs").exists()


# --------------------------------------------------------------------------- the report


def write_run_csv(folder: Path, steps: dict[int, float], run_id: str) -> None:
    folder.mkdir(parents=True)
    rows = "".join(f"0,{step},{value}\n" for step, value in steps.items())
    (folder / "metrics.csv").write_text("epoch,step,val/loss\n" + rows)
    (folder / "hparams.yaml").write_text("head: tied\nhidden_size: 64\n")
    layout.write_json(folder / layout.STATUS_FILE, {"state": "finished", "run": run_id})


def test_the_report_reads_each_run_folder_as_one_run(tmp_path):
    """Every attempt in a run folder is that run's, whatever run id its CSV version recorded."""
    root = tmp_path / "runs"
    new = root / "tied-0123abcd"
    write_run_csv(new / "csv" / "version_0", {5: 4.0}, "new")
    write_run_csv(new / "csv" / "version_1", {10: 3.5}, "evaluated")  # an attempt with another run id
    layout.write_json(new / layout.STATUS_FILE, {"state": "finished", "run": "new"})
    other = root / "untied-4567"
    write_run_csv(other / "csv" / "version_0", {5: 6.0}, "other")
    layout.write_json(other / layout.STATUS_FILE, {"state": "failed", "run": "other"})
    runs = {run.id: run for run in find_runs(root)}
    assert sorted(runs) == ["tied-0123abcd", "untied-4567"]
    assert runs["tied-0123abcd"].series("val/loss") == [(5, 4.0), (10, 3.5)]
    assert (runs["tied-0123abcd"].state, runs["untied-4567"].state) == ("finished", "failed")
