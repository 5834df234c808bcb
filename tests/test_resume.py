"""Exact resume: a run stopped at step 20 and resumed with --ckpt_path=last ends where an uninterrupted one does.

Every run is the real command line (configs/tied.yaml + configs/scale/tiny.yaml, CPU, seed 0)
with 40 steps. The data size is chosen per case so that step 20 falls mid-epoch or exactly at
an epoch boundary; the stop is an exception just before step 21 (in process) or a SIGKILL (in
a subprocess, nothing cleaned up). The resumed run must end with the same weights (to 1e-6)
and must really have resumed (its first step is not 0).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from reliability_helpers import (
    FirstStep,
    SimulatedCrash,
    every_n_steps_checkpoint,
    sigterm_in_validation,
    stop_at,
)
from run_dirs import run_checkpoint
from tiny_runs import TINY_TIED

from tiedemb.cli import main
from tiedemb.experiments.runs import find_runs

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
BLOCK, BATCH = 32, 8  # tiny.yaml's block_size and batch_size
STEPS = 40


def tokens_for(batches_per_epoch: int) -> int:
    return batches_per_epoch * BATCH * BLOCK


def fit_args(root: Path, batches_per_epoch: int, *extra: str) -> list[str]:
    return [
        "fit",
        *TINY_TIED,
        f"--trainer.max_steps={STEPS}",
        "--trainer.val_check_interval=10",
        "--trainer.limit_val_batches=1",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={root}",
        f"--data.synthetic_tokens={tokens_for(batches_per_epoch)}",
        "--trainer.callbacks+=reliability_helpers.FirstStep",
        *extra,
    ]


def first_step(cli) -> int | None:
    return next(cb.first_step for cb in cli.trainer.callbacks if isinstance(cb, FirstStep))


def assert_same_weights(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=1e-6, msg=name)


pytestmark = pytest.mark.usefixtures("one_thread")


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_in_a_process(root: Path, batches_per_epoch: int, *extra: str) -> subprocess.CompletedProcess:
    """``python main.py fit`` in its own process (a signal ends only it), with a CSV logger under ``root``."""
    env = {
        **os.environ,
        **ONE_THREAD,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    }
    logger = ["--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={root}"]
    args = [a for a in fit_args(root, batches_per_epoch, *logger, *extra) if a != "--trainer.logger=false"]
    # Ctrl-C as in a terminal: a process started in the background inherits SIGINT ignored
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def logged_steps(root: Path) -> dict[str, list[int]]:
    """The steps a run's CSV logs (every attempt) wrote its training and validation losses at."""
    steps: dict[str, list[int]] = {"train/loss": [], "val/loss": []}
    for path in sorted(root.glob("*/lightning_logs/version_*/metrics.csv")):
        for row in csv.DictReader(path.open()):
            for name, found in steps.items():
                if row.get(name):
                    found.append(int(row["step"]))
    return steps


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """Final weights of uninterrupted 40-step runs, by data size and model options (each run once)."""
    cache: dict[tuple, dict[str, torch.Tensor]] = {}

    def weights(batches_per_epoch: int, *model_args: str) -> dict[str, torch.Tensor]:
        key = (batches_per_epoch, *model_args)
        if key not in cache:
            cli = main(fit_args(tmp_path_factory.mktemp("straight"), batches_per_epoch, *model_args))
            assert cli.trainer.global_step == STEPS
            cache[key] = {k: v.detach().clone() for k, v in cli.model.state_dict().items()}
        return cache[key]

    return weights


@pytest.mark.parametrize(
    "batches_per_epoch,checkpoint_every,model_args",
    [
        # step 20 is the 5th batch of epoch 1; saved right after the step (mid-epoch, before any validation)
        (15, every_n_steps_checkpoint(20), ()),
        # the same with dropout, which draws from the global RNG: its state must come back too
        (15, every_n_steps_checkpoint(20), ("--model.dropout=0.1",)),
        # step 20 ends epoch 0; the newest last.ckpt is the one written after the epoch-end validation
        (20, None, ()),
    ],
    ids=["mid_epoch", "mid_epoch_dropout", "epoch_boundary"],
)
@pytest.mark.end_to_end
def test_stop_at_step_20_and_resume_to_40_equals_a_straight_run(
    tmp_path, straight, batches_per_epoch, checkpoint_every, model_args
):
    extra = [*model_args, *([checkpoint_every] if checkpoint_every else [])]
    with pytest.raises(SimulatedCrash):
        main(fit_args(tmp_path, batches_per_epoch, *extra, stop_at(20)))
    resumed = main(fit_args(tmp_path, batches_per_epoch, *extra, "--ckpt_path=last"))
    assert first_step(resumed) == 20, "the run started over instead of resuming"
    assert resumed.trainer.global_step == STEPS
    assert_same_weights(straight(batches_per_epoch, *model_args), resumed.model.state_dict())


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
@pytest.mark.end_to_end
def test_killed_run_resumes_exactly_in_its_run_folder(tmp_path, straight, signal_name):
    """SIGKILL or SIGTERM as step 28 starts (periodic checkpoint: step 25, mid-epoch, after validation),
    with a CSV logger.

    SIGKILL ends the process at once (status -9): the run resumes from step 25 and repeats three steps.
    On SIGTERM the run completes step 28, saves its state there and exits 143, not 0, so that a sweep or
    a scheduler does not take it for finished; the resumed run starts at step 28, not at 25.
    --ckpt_path=last finds the killed run's file in its run folder, and the resumed run goes on
    writing there (its CSV metrics as the folder's next version).
    """

    def run(*extra: str) -> subprocess.CompletedProcess:
        return run_in_a_process(tmp_path, 15, *extra)

    killed = run(stop_at(27, sigkill=signal_name == "SIGKILL", sigterm=signal_name == "SIGTERM"))
    expected_status = {"SIGKILL": -9, "SIGTERM": 143}[signal_name]
    assert killed.returncode == expected_status, killed.stderr[-3000:]
    killed_last = run_checkpoint(tmp_path)
    logs = killed_last.parent.parent / "lightning_logs"  # the CSV logger's own name, inside the run folder
    said = {"SIGTERM": "SIGTERM"}.get(signal_name)
    if said:
        assert f"stopped by {said}" in killed.stderr and "Traceback" not in killed.stderr
        assert f"{said}: saved the state after step 28 to {killed_last}" in killed.stderr
        assert f"stopped by {said}; --ckpt_path=last resumes it" in killed.stderr
    # where the resumed run starts: the signal's step, or the periodic checkpoint before a SIGKILL
    assert torch.load(killed_last, weights_only=True)["global_step"] == (28 if said else 25)
    # the run's own record: SIGTERM is written down; SIGKILL leaves "running" (nothing runs at a SIGKILL)
    killed_status = json.loads((logs / "version_0" / "status.json").read_text())
    if said:
        assert (killed_status["state"], killed_status["message"]) == ("failed", f"stopped by {said} after step 28")
    else:  # and a report, on this host, sees that its process is gone
        assert killed_status["state"] == "running"
        (killed_run,) = find_runs(tmp_path)
        assert killed_run.state == "lost" and "--ckpt_path=last resumes it" in killed_run.message

    resumed = run("--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {killed_last.resolve()}" in resumed.stderr
    final = torch.load(killed_last, weights_only=True)  # the same run folder, continued
    resumed_status = json.loads((logs / "version_1" / "status.json").read_text())
    assert (resumed_status["state"], resumed_status["stage"], resumed_status["step"]) == ("finished", "fit", STEPS)
    assert resumed_status["run"] == killed_status["run"]  # one run in two attempts, for the report
    assert final["global_step"] == STEPS
    assert_same_weights(straight(15), final["state_dict"])


def test_masks_and_order_are_functions_of_seed_epoch_and_index():
    """The same example is masked the same way whenever it is drawn, and differently in another epoch."""
    from tiedemb.data import PretrainData

    def batches(epoch: int, offset: int = 0) -> list[dict[str, torch.Tensor]]:
        data = PretrainData(vocab_size=200, block_size=16, batch_size=4, synthetic_tokens=16 * 4 * 6)
        data.setup("fit")
        loader = data.train_dataloader()
        loader.sampler.resume_at(epoch, offset)
        return list(loader)

    epoch1 = batches(1)
    assert len(epoch1) == 6
    resumed = batches(1, offset=2 * 4)
    for whole, part in zip(epoch1[2:], resumed, strict=True):
        for key in whole:
            torch.testing.assert_close(part[key], whole[key], rtol=0, atol=0)
    epoch2 = batches(2)
    assert not torch.equal(torch.cat([b["labels"] for b in epoch1]), torch.cat([b["labels"] for b in epoch2]))


@pytest.mark.end_to_end
def test_last_checkpoint_is_the_newest_state_even_when_validation_did_not_improve(tmp_path):
    """With a learning rate of 0 every validation loss ties the first, so no top-k checkpoint is
    written after step 5; last.ckpt must still move on to step 10 (Lightning's own ModelCheckpoint
    would leave it at step 5, and a resumed run would repeat five steps)."""
    main(
        [*fit_args(tmp_path, 20, "--model.learning_rate=0", "--trainer.val_check_interval=5"), "--trainer.max_steps=10"]
    )
    folder = run_checkpoint(tmp_path).parent
    assert len(list(folder.glob("step*.ckpt"))) == 1  # the best: step 5
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 10


@pytest.mark.end_to_end
def test_last_checkpoint_holds_the_final_step_when_training_ends_between_validations(tmp_path):
    main([*fit_args(tmp_path, 20, "--trainer.val_check_interval=5"), "--trainer.max_steps=7"])
    folder = run_checkpoint(tmp_path).parent
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 7
    assert {torch.load(path, weights_only=True)["global_step"] for path in folder.glob("step*.ckpt")} == {5}


def test_sampler_shares_each_epoch_between_processes_and_resumes_part_way():
    from tiedemb.data.sampling import ResumableSampler

    dataset = range(10)
    ranks = [ResumableSampler(dataset, seed=3, num_replicas=2, rank=rank, keyed=False) for rank in range(2)]
    for sampler in ranks:
        sampler.set_epoch(4)
    shares = [list(sampler) for sampler in ranks]
    assert sorted(shares[0] + shares[1]) == list(range(10)) and all(isinstance(i, int) for i in shares[0])
    ranks[0].resume_at(4, offset=3)
    assert list(ranks[0]) == shares[0][3:] and len(ranks[0]) == 5  # length stays the whole share
    ranks[0].set_epoch(5)
    assert len(list(ranks[0])) == 5  # the offset applied to the resumed epoch only
    keyed = ResumableSampler(dataset, seed=3)
    keyed.set_epoch(4)
    assert all(epoch == 4 for epoch, _ in keyed)


@pytest.fixture(scope="module")
def straight_in_a_process(tmp_path_factory):
    """The logged steps and final weights of uninterrupted runs in a process of their own, by data size."""
    cache: dict[int, tuple[dict[str, list[int]], dict[str, torch.Tensor]]] = {}

    def run(batches_per_epoch: int) -> tuple[dict[str, list[int]], dict[str, torch.Tensor]]:
        if batches_per_epoch not in cache:
            root = tmp_path_factory.mktemp("straight")
            done = run_in_a_process(root, batches_per_epoch)
            assert done.returncode == 0, done.stderr[-3000:]
            final = torch.load(run_checkpoint(root), weights_only=True)
            cache[batches_per_epoch] = (logged_steps(root), final["state_dict"])
        return cache[batches_per_epoch]

    return run


@pytest.mark.parametrize(
    "batches_per_epoch,signal_during,saved_after",
    [
        # validation every 10 steps; 15 batches an epoch: validations after steps 10, 25 and 40
        (15, "step 10", 10),  # a step that validates: the last written at its validation is that state
        (15, "step 20", 20),  # a step that does not validate: saved after it
        (15, "the validation after step 25", 25),  # its one batch is its last: it completes, then the step ends
        (15, "step 15", None),  # an epoch's last step: not saved, resumed from the last of step 10
        (20, "step 20", 20),  # an epoch's last step that validates: the last written at its validation
    ],
)
@pytest.mark.end_to_end
def test_a_run_stopped_by_sigterm_where_a_validation_or_an_epoch_ends_resumes_as_a_straight_one(
    tmp_path, straight_in_a_process, batches_per_epoch, signal_during, saved_after
):
    """Whatever the signal saves is a state Lightning resumes exactly: the resumed run logs every metric at
    the steps an uninterrupted run does and ends with its weights (resumed from an earlier checkpoint,
    it ends with them too). (Saved as the loops stand in a
    validation or at an epoch's end, it would log every later metric a step late, or skip the rest
    of the next epoch: training/checkpoints.py.)"""
    step = int(signal_during.split()[-1])
    signal_arg = sigterm_in_validation(step) if "validation" in signal_during else stop_at(step - 1, sigterm=True)
    stopped = run_in_a_process(tmp_path, batches_per_epoch, signal_arg)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    if saved_after is None:
        assert "the state is not saved" in stopped.stderr and "saved the state" not in stopped.stderr
    else:
        assert f"saved the state after step {saved_after} " in stopped.stderr
    resumed = run_in_a_process(tmp_path, batches_per_epoch, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    steps, weights = straight_in_a_process(batches_per_epoch)
    if saved_after is not None:  # resumed from an earlier step, the run logs the steps since then twice
        assert logged_steps(tmp_path) == steps
    assert_same_weights(weights, torch.load(run_checkpoint(tmp_path), weights_only=True)["state_dict"])
