"""``bf16-mixed-if-native``: bf16 where the hardware computes it, 32-true where torch would emulate it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.accelerators import CPUAccelerator
from tiny_runs import TINY_TIED

from tiedemb.cli import main
from tiedemb.training.run_checks import BF16_IF_NATIVE, bf16_is_native, resolve_precision, runs_on_cpu

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture
def cpu_bf16(monkeypatch):
    """Sets whether the CPU has bfloat16 hardware, whatever this machine has."""

    def set_native(native: bool) -> None:
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": native, "amx_bf16": False})

    return set_native


@pytest.mark.parametrize(("native", "chosen"), [(True, "bf16-mixed"), (False, "32-true")])
def test_if_native_follows_the_cpu(cpu_bf16, recwarn, native, chosen):
    cpu_bf16(native)
    assert resolve_precision(BF16_IF_NATIVE, "cpu") == chosen
    assert not [w for w in recwarn if "bfloat16" in str(w.message)]


def test_other_precisions_pass_through_unchanged(cpu_bf16):
    cpu_bf16(False)
    assert resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"
    assert resolve_precision("32-true", "cpu") == "32-true"
    assert resolve_precision(None, "cpu") is None


def test_the_gpu_decides_off_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: not including_emulation)
    assert not runs_on_cpu("auto") and not runs_on_cpu("gpu") and runs_on_cpu("cpu") and runs_on_cpu(CPUAccelerator())
    assert resolve_precision(BF16_IF_NATIVE, "gpu") == "bf16-mixed"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)  # pre-Ampere
    assert resolve_precision(BF16_IF_NATIVE, "auto") == "32-true"


def test_the_command_line_takes_it_and_the_saved_config_keeps_it(tmp_path):
    cli = main(
        [
            "fit",
            *TINY_TIED,
            "--trainer.logger=false",
            "--trainer.max_steps=1",
            "--trainer.limit_val_batches=1",
            f"--trainer.default_root_dir={tmp_path}",
            f"--trainer.precision={BF16_IF_NATIVE}",
        ]
    )
    expected = "bf16-mixed" if bf16_is_native(on_cpu=True) else "32-true"
    assert cli.trainer.precision == expected
    saved = yaml.safe_load((Path(cli.run_dir) / "config.yaml").read_text())
    assert saved["trainer"]["precision"] == BF16_IF_NATIVE  # the recipe's intent, resolved on each machine


def test_the_cpu_width_study_asks_for_it():
    sweep = yaml.safe_load((CONFIGS / "sweeps" / "repro_width_cpu.yaml").read_text())
    fine_tuning = [
        study for name, study in sweep["studies"].items() if name != "pretrain" and study.get("command", "fit") == "fit"
    ]  # the probe trains nothing
    assert fine_tuning and all(study["overrides"]["trainer.precision"] == BF16_IF_NATIVE for study in fine_tuning)


def test_a_mixed_precision_run_gets_no_model_summary_warning_about_its_size(tmp_path, recwarn):
    """bf16-mixed keeps float32 parameters: the summary's 32-bit size is right, so its warning is not shown."""
    main(
        [
            "fit",
            *TINY_TIED,
            "--trainer.logger=false",
            "--trainer.max_steps=1",
            "--trainer.limit_val_batches=1",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.precision=bf16-mixed",
        ]
    )
    assert not [w for w in recwarn if "not supported by the model summary" in str(w.message)]
