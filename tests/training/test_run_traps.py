"""Failures that leave no traps: a failed run's name is free again, advice names only files that exist,
more CPU processes than cores are refused, and DDP ranks > 0 take rank 0's run folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bert_helpers import write_mrpc

from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.training.run_dir import (
    PARENT_RUN_DIR,
    choose_run_dir,
    failed_without_checkpoint,
    run_dir_of_parent,
    share_run_dir,
)
from tiedemb.training.strategy import check_cpu_processes

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--trainer.logger=false"]


def write_status(folder: Path, state: str, **fields) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status.json").write_text(json.dumps({"state": state, **fields}))


def test_a_run_name_whose_run_failed_before_any_checkpoint_is_free_again(tmp_path, caplog):
    failed = tmp_path / "mine"
    write_status(failed, "failed", message="UserError: bad file")
    (failed / "wandb").mkdir()
    (failed / "config.yaml").write_text("{}\n")
    assert failed_without_checkpoint(failed)
    with caplog.at_level("WARNING", logger="tiedemb"):
        assert choose_run_dir(tmp_path, "mine", "x") == (failed, False)
    assert list(failed.iterdir()) == []  # the failed attempt's files are gone, the folder is the new run's
    assert "held a run that failed before its first checkpoint" in caplog.text


@pytest.mark.parametrize("case", ["checkpoint", "finished", "no status"])
def test_a_run_folder_with_a_checkpoint_or_a_finished_run_is_never_cleared(tmp_path, case):
    folder = tmp_path / "mine"
    write_status(folder, "finished" if case == "finished" else "failed")
    if case == "checkpoint":
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "step3.ckpt").write_bytes(b"")
    if case == "no status":
        (folder / "status.json").unlink()
        (folder / "notes.txt").write_text("mine")
    with pytest.raises(UserError) as refused:
        choose_run_dir(tmp_path, "mine", "x")
    advice = f", or continue that run with --ckpt_path={folder / 'checkpoints' / 'step3.ckpt'}"
    assert str(refused.value).endswith(advice if case == "checkpoint" else "choose another --run_name")
    assert any(folder.iterdir())


def test_more_cpu_processes_than_cores_are_refused_in_one_line():
    with pytest.raises(UserError) as refused:
        check_cpu_processes({"accelerator": "cpu", "devices": 4}, cores=2)
    assert str(refused.value) == (
        "trainer.devices=4 starts 4 training processes on the CPU, but this machine has 2 cores; "
        "pass --trainer.devices=2 or fewer"
    )
    check_cpu_processes({"accelerator": "cpu", "devices": 2}, cores=2)
    check_cpu_processes({"accelerator": "cpu", "devices": "auto"}, cores=2)
    check_cpu_processes({"accelerator": "gpu", "devices": 4}, cores=2)


@pytest.mark.end_to_end
def test_devices_beyond_the_cores_exit_2_before_any_run_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args = ["fit", "--config", str(CONFIGS / "tied.yaml"), "--config", str(CONFIGS / "scale" / "tiny.yaml")]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--trainer.accelerator=cpu", f"--trainer.devices={cores + 1}", *QUIET])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: trainer.devices={cores + 1} starts")
    assert list(tmp_path.iterdir()) == []


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


@pytest.mark.end_to_end
def test_a_fit_that_failed_on_a_bad_file_is_run_again_under_its_name_once_the_file_is_fixed(
    tmp_path, tiny_tokenizer_dir, monkeypatch, capsys
):
    """The dev file is read by the data module's setup, after the run folder exists: the failed attempt
    leaves a folder with no checkpoint, and the same command line with the file fixed takes its name."""
    monkeypatch.chdir(tmp_path)
    write_mrpc(tmp_path / "glue")
    dev = tmp_path / "glue" / "MRPC" / "dev.tsv"
    good = dev.read_text(encoding="utf-8")
    dev.write_text("garbage\n")
    args = [
        "fit",
        "--config",
        str(CONFIGS / "glue" / "mrpc.yaml"),
        "--data.data_dir=glue",
        f"--data.tokenizer={tiny_tokenizer_dir}",
        "--model.pretrained=null",
        "--model.hidden_size=32",
        "--model.num_layers=1",
        "--model.num_heads=2",
        "--model.intermediate_size=64",
        "--data.max_length=32",
        "--trainer.max_steps=1",
        "--run_name=mrpc",
        *QUIET,
    ]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert json.loads((tmp_path / "runs" / "mrpc" / "status.json").read_text())["state"] == "failed"
    dev.write_text(good, encoding="utf-8")
    cli = main(args)
    assert Path(cli.run_dir) == Path("runs/mrpc")
    assert (tmp_path / "runs" / "mrpc" / "checkpoints" / "best.ckpt").is_file()
    assert json.loads((tmp_path / "runs" / "mrpc" / "status.json").read_text())["state"] == "finished"
