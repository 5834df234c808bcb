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
