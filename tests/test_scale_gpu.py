"""Lightning's FSDP and DeepSpeed strategies end to end: CUDA only (``pytest -m gpu``).

Each test runs the real command line with a configs/strategy overlay at tiny scale, then loads the
checkpoint on a single device (gathered by Lightning's tools where the strategy writes a folder) and checks
that the tied matrix is one parameter with one value. The CPU counterparts (configs, refusals,
FSDP sharding with gloo, DDP equivalence) are tests/test_scale.py and tests/test_ddp.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_if import run_if

from tiedemb import PretrainModule

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

pytestmark = [
    pytest.mark.gpu,
    run_if(cuda=True),  # Lightning's FSDP and DeepSpeed need one
]


def devices() -> int:
    return min(2, torch.cuda.device_count())


def fit(root: Path, variant: str, strategy: str, *args: str) -> Path:
    """``main.py fit`` on ``variant`` + tiny + the strategy overlay; returns ``last.ckpt`` (file or folder)."""
    root.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(ROOT / "main.py"),
        "fit",
        "--config",
        str(CONFIGS / f"{variant}.yaml"),
        "--config",
        str(CONFIGS / "scale" / "tiny.yaml"),
        "--config",
        str(CONFIGS / "strategy" / f"{strategy}.yaml"),
        "--trainer.accelerator=gpu",
        f"--trainer.devices={devices()}",
        "--trainer.max_steps=4",
        "--trainer.val_check_interval=2",
        "--trainer.limit_val_batches=1",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={root}",
        *args,
    ]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=root, env=env, timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    (last,) = root.rglob("last.ckpt")
    return last


def assert_reloads_tied(checkpoint: Path, head: str) -> None:
    reloaded = PretrainModule.load_from_checkpoint(checkpoint, map_location="cpu")
    assert reloaded.hparams.head == head
    assert reloaded.model.is_tied
    vocab = reloaded.hparams.vocab_size
    assert [name for name, p in reloaded.named_parameters() if p.ndim == 2 and vocab in p.shape] == [
        "model.embedding.token.weight"
    ]
    assert torch.isfinite(reloaded.model.embedding.token.weight).all()


@pytest.mark.parametrize("variant", ["tied", "tied_orth"])
def test_fsdp_full_state_checkpoint_loads_on_one_device_tied(tmp_path, variant):
    last = fit(tmp_path, variant, "fsdp")
    assert last.is_file()  # state_dict_type: full gathers one ordinary file on rank 0
    saved = torch.load(last, map_location="cpu", weights_only=False)["state_dict"]
    assert torch.equal(saved["model.embedding.token.weight"], saved["model.head.decoder.weight"])
    assert_reloads_tied(last, variant)


def test_fsdp_sharded_checkpoint_consolidated_by_lightnings_command_loads_tied(tmp_path):
    last = fit(tmp_path, "tied_orth", "fsdp", "--trainer.strategy.init_args.state_dict_type=sharded")
    assert last.is_dir()
    consolidated = tmp_path / "model.ckpt"
    command = [sys.executable, "-m", "lightning.pytorch.utilities.consolidate_checkpoint", str(last)]
    subprocess.run([*command, "--output_file", str(consolidated)], check=True, capture_output=True)
    assert_reloads_tied(consolidated, "tied_orth")


def test_fsdp_refuses_a_policy_that_wraps_the_head_apart_from_the_embedding(tmp_path):
    with pytest.raises(AssertionError) as failed:
        fit(
            tmp_path,
            "tied",
            "fsdp",
            "--trainer.strategy.init_args.auto_wrap_policy=[tiedemb.nn.model.Block, torch.nn.Linear]",
        )
    assert "holds only one of the two" in str(failed.value)
    assert "Traceback" not in str(failed.value)


@run_if(min_cuda_devices=2)  # one GPU runs NO_SHARD
def test_fsdp_on_two_gpus_matches_one_gpu_with_the_global_batch(tmp_path):
    clm = ("--model.objective=clm", "--trainer.val_check_interval=4")
    sharded = torch.load(
        fit(tmp_path / "fsdp", "tied", "fsdp", *clm, "--data.batch_size=4"), map_location="cpu", weights_only=False
    )["state_dict"]
    single = torch.load(
        fit(tmp_path / "one", "tied", "ddp", *clm, "--data.batch_size=8", "--trainer.devices=1"),
        map_location="cpu",
        weights_only=False,
    )["state_dict"]
    for name, value in single.items():
        torch.testing.assert_close(sharded[name], value, rtol=0, atol=1e-4, msg=name)


@pytest.mark.parametrize(
    "stage,args",
    [
        ("deepspeed_zero2", ()),
        ("deepspeed_zero3", ()),
        # The embedding module reads the position and segment tables outside their own forward:
        # ZeRO-3 must gather them too.
        ("deepspeed_zero3", ("--model.position=learned", "--model.type_vocab_size=2")),
    ],
    ids=["zero2", "zero3", "zero3-learned-positions"],
)
@run_if(packages=["deepspeed"])
def test_deepspeed_checkpoint_gathered_by_lightning_loads_on_one_device_tied(tmp_path, stage, args):
    from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

    last = fit(tmp_path, "tied", stage, *args)
    assert last.is_dir()  # DeepSpeed writes one folder of partitions
    consolidated = tmp_path / "model.ckpt"
    convert_zero_checkpoint_to_fp32_state_dict(str(last), str(consolidated))
    assert_reloads_tied(consolidated, "tied")


def test_ddp_on_gpus_checkpoint_reloads_tied(tmp_path):
    assert_reloads_tied(fit(tmp_path, "tied_orth", "ddp"), "tied_orth")
