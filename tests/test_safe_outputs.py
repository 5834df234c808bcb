"""Nothing lost, nothing unsafe: atomic checkpoints, no broken checkpoint after divergence,
no run overwriting another's checkpoints, weights_only loading, no remote code."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from reliability_helpers import FirstStep
from run_dirs import run_checkpoint

from tiedemb import PretrainModule
from tiedemb.cli import main
from tiedemb.training.checkpoints import AtomicCheckpointIO
from tiedemb.training.files import PARTIAL_SUFFIX, atomic_write, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
HELPERS = Path(__file__).parent


pytestmark = pytest.mark.usefixtures("one_thread")


def fit_args(root: Path, *extra: str, steps: int = 12, config: str = "tied.yaml") -> list[str]:
    return [
        "fit",
        "--config",
        str(CONFIGS / config),
        "--config",
        str(CONFIGS / "scale" / "tiny.yaml"),
        f"--trainer.max_steps={steps}",
        "--trainer.val_check_interval=5",
        "--trainer.limit_val_batches=1",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={root}",
        *extra,
    ]


def callback(class_path: str, **init_args) -> str:
    return "--trainer.callbacks+=" + json.dumps({"class_path": class_path, "init_args": init_args})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- atomic writes


@pytest.mark.end_to_end
def test_sigkill_during_a_checkpoint_write_leaves_the_previous_checkpoint_intact(tmp_path):
    """The write of last.ckpt at step 10 stalls half-way and the process is SIGKILLed.

    last.ckpt must still be the complete step-5 checkpoint (loadable with weights_only=True),
    the half-written bytes only in a hidden partial file, and a resumed run must start from it
    and clear the partial file away.
    """
    marker = tmp_path / "writing"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")]),
    }
    args = fit_args(
        tmp_path, callback("reliability_helpers.HangInCheckpointWriteAfter", step=10, marker=str(marker)), steps=40
    )
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "main.py"), *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert process.poll() is None, process.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the checkpoint write never started"
            time.sleep(0.2)
        last = run_checkpoint(tmp_path)
        before = digest(last)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        process.stderr.close()

    partials = list(last.parent.glob(f".last.ckpt.*{PARTIAL_SUFFIX}"))
    assert partials and partials[0].stat().st_size > 0, "the write was not in progress when the process died"
    assert digest(last) == before
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] == 5
    assert PretrainModule.load_from_checkpoint(last, weights_only=True).hparams.head == "tied"

    resumed = main(
        fit_args(tmp_path, "--trainer.callbacks+=reliability_helpers.FirstStep", "--ckpt_path=last", steps=12)
    )
    assert next(cb.first_step for cb in resumed.trainer.callbacks if isinstance(cb, FirstStep)) == 5
    assert not list(last.parent.glob(f".last.ckpt.*{PARTIAL_SUFFIX}")), "the dead writer's partial file was kept"


def test_atomic_write_keeps_the_old_file_when_the_writer_fails(tmp_path):
    report = tmp_path / "report.json"
    atomic_write_text(report, '{"ok": 1}')
    with pytest.raises(RuntimeError), atomic_write(report) as handle:
        handle.write('{"half": ')
        raise RuntimeError("crash while writing")
    assert json.loads(report.read_text()) == {"ok": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


@pytest.mark.end_to_end
def test_the_cli_trainer_writes_checkpoints_atomically(tmp_path):
    cli = main(fit_args(tmp_path)[1:], run=False)  # without the subcommand: build, do not run
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)


# --------------------------------------------------------------------------- divergence


@pytest.mark.parametrize(
    "poisoned_step,message",
    [
        (7, "the training loss became nan at step 7"),  # caught by the next training step
        (10, "the weights became non-finite"),  # caught when the step-10 checkpoint is written
    ],
    ids=["loss_check", "checkpoint_check"],
)
@pytest.mark.end_to_end
def test_divergence_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys, poisoned_step, message):
    with pytest.raises(SystemExit) as exited:
        main(fit_args(tmp_path, callback("reliability_helpers.PoisonWeightsAt", step=poisoned_step)))
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    last = torch.load(run_checkpoint(tmp_path), weights_only=True)
    assert last["global_step"] == 5
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values() if t.is_floating_point())
    for path in run_checkpoint(tmp_path).parent.glob("*.ckpt"):
        state = torch.load(path, weights_only=True)["state_dict"]
        assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point()), path


# --------------------------------------------------------------------------- separate runs


@pytest.mark.end_to_end
def test_runs_without_a_logger_never_overwrite_each_others_checkpoints(tmp_path, capsys):
    first = Path(main(fit_args(tmp_path, steps=5)).run_dir) / "checkpoints" / "last.ckpt"
    first_digest = digest(first)
    second = Path(main(fit_args(tmp_path, steps=5)).run_dir) / "checkpoints" / "last.ckpt"
    assert second.is_file() and second != first and digest(first) == first_digest

    # --ckpt_path=last continues the newest run of this configuration, in its own folder
    resumed = main(
        fit_args(tmp_path, "--trainer.callbacks+=reliability_helpers.FirstStep", "--ckpt_path=last", steps=10)
    )
    assert f"resuming from {second.resolve()}" in capsys.readouterr().err
    assert next(cb.first_step for cb in resumed.trainer.callbacks if isinstance(cb, FirstStep)) == 5
    assert torch.load(second, weights_only=True)["global_step"] == 10
    assert digest(first) == first_digest and len(list(tmp_path.glob("*/checkpoints"))) == 2

    # another variant in the same folder does not pick up the tied runs' checkpoints
    other = main(
        fit_args(
            tmp_path,
            "--trainer.callbacks+=reliability_helpers.FirstStep",
            "--ckpt_path=last",
            steps=1,
            config="untied.yaml",
        )
    )
    assert "found no checkpoint of this configuration" in capsys.readouterr().err
    assert next(cb.first_step for cb in other.trainer.callbacks if isinstance(cb, FirstStep)) == 0
    assert (Path(other.run_dir) / "checkpoints" / "last.ckpt").is_file()
    assert len(list(tmp_path.glob("*/checkpoints/last.ckpt"))) == 3


# --------------------------------------------------------------------------- safe loading


def test_remote_code_is_never_trusted_by_default():
    offenders = []
    for path in [*ROOT.joinpath("tiedemb").rglob("*.py"), *CONFIGS.rglob("*.yaml"), ROOT / "main.py"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in re.finditer(r"trust_remote_code\s*[=:]\s*([^\s,)]+)", line):
                if match.group(1) not in ("False", "false"):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, offenders
