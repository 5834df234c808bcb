"""Whether the configured strategy can run on this machine, decided before anything is built.

The strategies themselves are Lightning's, chosen in YAML (``configs/strategy/*.yaml``); see
docs/scale-out.md. Lightning would otherwise fail later with an import error or a stack trace
from its accelerator checks, after the data had been prepared.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import torch

from tiedemb.errors import UserError


def strategy_kind(strategy: Any) -> str | None:
    """``"fsdp"``, ``"deepspeed"``, ``"ddp"`` or None for a ``trainer.strategy`` value.

    The value may be a registered name (``deepspeed_stage_3``), a class path in a parsed config
    (a mapping with ``class_path``) or a strategy object.
    """
    if strategy is None:
        return None
    if isinstance(strategy, str):
        name = strategy
    elif isinstance(strategy, Mapping) or hasattr(strategy, "class_path"):
        name = str(strategy.get("class_path") if isinstance(strategy, Mapping) else strategy.class_path)
    else:
        name = type(strategy).__name__
    name = name.rsplit(".", 1)[-1].lower()
    for kind in ("fsdp", "deepspeed", "ddp"):
        if kind in name:
            return kind
    return None


def check_strategy_config(trainer: Any) -> None:
    """Refuse, in words, a strategy that cannot run on this machine.

    ``trainer`` is the ``trainer`` section of a parsed config (a jsonargparse Namespace or a dict).

    Lightning would otherwise fail later with an import error or a stack trace from its
    accelerator checks, after the data had been prepared.
    """
    if not trainer:
        return
    kind = strategy_kind(trainer.get("strategy"))
    if kind not in ("fsdp", "deepspeed"):
        return
    label = {"fsdp": "FSDP", "deepspeed": "DeepSpeed"}[kind]
    if kind == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise UserError(
            "trainer.strategy is DeepSpeed, but the deepspeed package is not installed; run "
            "`pip install deepspeed` (on a machine with CUDA), or choose configs/strategy/ddp.yaml or fsdp.yaml"
        )
    accelerator = trainer.get("accelerator")
    on_cpu = isinstance(accelerator, str) and accelerator.lower() == "cpu"
    if on_cpu or not torch.cuda.is_available():
        raise UserError(
            f"trainer.strategy is {label}, which runs on CUDA GPUs only"
            + (" (trainer.accelerator=cpu)" if on_cpu else " and none is visible here")
            + "; on CPUs use configs/strategy/ddp.yaml (--trainer.accelerator=cpu --trainer.devices=N)"
        )


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system tells it)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_cpu_processes(trainer: Any, cores: int | None = None) -> None:
    """Refuse more CPU processes (``trainer.devices`` on CPUs) than this machine has cores.

    On CPUs each device is a process of its own (gloo), each running the whole model: four of them
    on two cores run no faster than two, and slower than one, while taking four times the memory.
    ``devices: auto`` or ``-1`` takes one process per core, which is what Lightning does.
    """
    if not trainer:
        return
    accelerator = trainer.get("accelerator")
    on_cpu = (isinstance(accelerator, str) and accelerator.lower() == "cpu") or (
        accelerator in (None, "auto") and not torch.cuda.is_available()
    )
    devices = trainer.get("devices")
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if not on_cpu or not isinstance(devices, int) or isinstance(devices, bool) or devices <= 1:
        return
    cores = cpu_cores() if cores is None else cores
    if devices > cores:
        raise UserError(
            f"trainer.devices={devices} starts {devices} training processes on the CPU, but this machine has "
            f"{cores} core{'s' if cores != 1 else ''}; pass --trainer.devices={cores} or fewer"
        )
