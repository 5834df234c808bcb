"""DDP on CPU (gloo, 2 processes) through the real command line: same weights as one process.

Why the two runs are exactly the same computation:

* data: ``ResumableSampler`` draws one permutation per epoch and gives rank r the positions
  r, r + 2, ...; with a per-process batch b, step k of the two ranks together covers positions
  2bk .. 2bk + 2b - 1, which is step k of one process with batch 2b. Masks and other per-example
  randomness follow from each example's key, not from the process that loads it.
* loss: DDP averages the two ranks' gradients. That equals the gradient of the mean over the 2b
  examples only if both ranks average over the same number of targets, which holds for CLM on
  unpadded blocks (every position but the last is a target) and not for MLM (each rank divides by
  its own count of masked tokens). Hence ``objective: clm`` here; dropout is already 0 in tied.yaml.
* initialisation: every process builds the model from the same seed, and DDP broadcasts rank 0's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from reliability_helpers import every_n_steps_checkpoint, stop_at
from run_dirs import run_checkpoint
from tiny_runs import TINY_TIED

from tiedemb import PretrainModule

pytestmark = pytest.mark.end_to_end  # runs the real command line

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
STEPS = 9
PER_PROCESS_BATCH = 4
# tiny.yaml's blocks are 32 tokens: 6 steps an epoch at the global batch of 8, so the 9 steps cross
# an epoch boundary; validations at steps 3, 6 and 9.
TOKENS = 6 * 2 * PER_PROCESS_BATCH * 32
DDP = ["--trainer.devices=2", "--trainer.strategy=ddp", f"--data.batch_size={PER_PROCESS_BATCH}"]


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``main.py fit`` on tied.yaml + tiny.yaml (CLM, 9 steps) in a subprocess, in ``root``."""
    command = [
        sys.executable,
        str(ROOT / "main.py"),
        "fit",
        *TINY_TIED,
        "--trainer.accelerator=cpu",
        "--model.objective=clm",
        f"--trainer.max_steps={STEPS}",
        f"--data.synthetic_tokens={TOKENS}",
        "--trainer.val_check_interval=3",
        "--trainer.limit_val_batches=1",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={root}",
        *args,
    ]
    # One thread per process: the two ranks share the machine's cores with everything else.
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "disabled",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    }
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.run(command, capture_output=True, text=True, cwd=root, env=env, timeout=900)


def fit(root: Path, *args: str) -> Path:
    """``run``, which must succeed; its last checkpoint."""
    result = run(root, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoints = sorted(root.rglob("last.ckpt"))
    assert len(checkpoints) == 1, checkpoints
    # one run folder, rank 0's: the process of rank 1 runs the same command line and takes it too
    assert [path for path in root.iterdir() if path.is_dir()] == [checkpoints[0].parents[1]]
    return checkpoints[0]


@pytest.fixture(scope="module")
def straight_ddp(tmp_path_factory) -> Path:
    """One uninterrupted 2-process run, the reference of both tests: its last checkpoint."""
    return fit(tmp_path_factory.mktemp("straight_ddp"), *DDP)


def vocabulary_matrices(module: PretrainModule) -> list[str]:
    vocab = module.hparams.vocab_size
    return [name for name, p in module.named_parameters() if p.ndim == 2 and vocab in p.shape]


def test_ddp_on_two_cpu_processes_equals_one_process_with_the_global_batch(tmp_path, straight_ddp):
    single = fit(tmp_path / "single", "--trainer.devices=1", f"--data.batch_size={2 * PER_PROCESS_BATCH}")

    ddp_state = torch.load(straight_ddp, map_location="cpu", weights_only=False)
    single_state = torch.load(single, map_location="cpu", weights_only=False)
    assert ddp_state["global_step"] == single_state["global_step"] == STEPS
    # The sampler state proves the first run really split the data over two processes.
    assert ddp_state["PretrainData"]["position"]["num_replicas"] == 2
    assert single_state["PretrainData"]["position"]["num_replicas"] == 1
    assert ddp_state["state_dict"].keys() == single_state["state_dict"].keys()
    for name, value in single_state["state_dict"].items():
        torch.testing.assert_close(ddp_state["state_dict"][name], value, rtol=0, atol=1e-5, msg=name)

    # Both optimisers took every step with non-zero gradients, so the weights compared above moved.
    for state in (ddp_state, single_state):
        moments = state["optimizer_states"][0]["state"].values()
        assert all(float(moment["step"]) == STEPS and moment["exp_avg"].abs().sum() > 0 for moment in moments)

    reloaded = PretrainModule.load_from_checkpoint(straight_ddp)
    assert reloaded.model.is_tied
    assert vocabulary_matrices(reloaded) == ["model.embedding.token.weight"]


@pytest.mark.slow
def test_the_documented_ddp_command_runs_and_its_checkpoint_reloads_tied(tmp_path):
    """The command of docs/scale-out.md exactly, default loggers included (W&B offline)."""
    command = [
        sys.executable,
        str(ROOT / "main.py"),
        "fit",
        *TINY_TIED,
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
    ]
    env = {**os.environ, "WANDB_MODE": "offline"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    # the loggers write into rank 0's run folder only: rank 1 makes no (empty) folder of its own
    assert [path.name for path in (tmp_path / "runs").iterdir()] == [checkpoint.parents[1].name]
    reloaded = PretrainModule.load_from_checkpoint(checkpoint)
    assert reloaded.hparams.head == "tied" and reloaded.model.is_tied
    assert vocabulary_matrices(reloaded) == ["model.embedding.token.weight"]


def test_ddp_stopped_mid_epoch_resumes_exactly(tmp_path, straight_ddp):
    """One 2-process run saves a checkpoint after step 4 (mid-epoch) and stops there on both ranks;
    resumed with --ckpt_path=last it must end with the uninterrupted DDP run's weights, to 1e-6."""
    from tiedemb.training.checkpoints import last_checkpoints

    stopped = run(tmp_path, *DDP, every_n_steps_checkpoint(4), stop_at(4))
    assert stopped.returncode != 0 and "stopped before step 5" in stopped.stderr, stopped.stderr[-3000:]
    # the step-4 checkpoint is the newest (last-v1.ckpt beside the validations' last.ckpt of step 3)
    (newest,) = last_checkpoints([tmp_path])[:1]
    saved = torch.load(newest, map_location="cpu", weights_only=True)
    assert saved["global_step"] == 4 and saved["PretrainData"]["position"]["num_replicas"] == 2
    resumed = run(tmp_path, *DDP, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {newest}" in resumed.stderr

    expected = torch.load(straight_ddp, map_location="cpu", weights_only=True)
    final = torch.load(run_checkpoint(tmp_path), map_location="cpu", weights_only=True)
    assert final["global_step"] == expected["global_step"] == STEPS
    assert final["state_dict"].keys() == expected["state_dict"].keys()
    for name, value in expected["state_dict"].items():
        torch.testing.assert_close(final["state_dict"][name], value, rtol=0, atol=1e-6, msg=name)
