"""Checkpoints as W&B artifacts, switched on for every run by one environment variable.

Lightning's ``WandbLogger`` uploads the checkpoints ``ModelCheckpoint`` writes when its
``log_model`` is set: ``true`` at the end of a successful fit (the best and the last checkpoint,
as artifact ``model-<run id>`` with the aliases ``best`` and ``latest``), ``all`` each time one is
written. The default loggers are a list, where a single logger's argument cannot be set from the
command line, and sweeps write their own logger lists, so the switch is the environment variable
``TIEDEMB_WANDB_LOG_MODEL`` (``true``, ``all`` or ``false``): it reaches every run a sweep, a SLURM
array or a W&B agent starts, and it is applied to each configured W&B logger before the loggers
are built, so the resolved ``config.yaml`` records it. It turns logging on: a logger a config
already gives ``log_model: true`` or ``all`` keeps its value.
"""

from __future__ import annotations

import os
from typing import Any

from tiedemb.errors import UserError

LOG_MODEL_ENV = "TIEDEMB_WANDB_LOG_MODEL"
WANDB_LOGGER = "lightning.pytorch.loggers.WandbLogger"
VALUES: dict[str, bool | str] = {
    "true": True,
    "1": True,
    "yes": True,
    "all": "all",
    "false": False,
    "0": False,
    "no": False,
}


def log_model_setting() -> bool | str | None:
    """The ``log_model`` that ``TIEDEMB_WANDB_LOG_MODEL`` asks for, or ``None`` when it is unset."""
    text = os.environ.get(LOG_MODEL_ENV, "").strip().lower()
    if not text:
        return None
    if text not in VALUES:
        raise UserError(f"{LOG_MODEL_ENV}={os.environ[LOG_MODEL_ENV]!r} is not one of true, all, false")
    return VALUES[text]


def _is_wandb_logger(entry: Any) -> bool:
    class_path = entry.get("class_path") if hasattr(entry, "get") else None
    return isinstance(class_path, str) and class_path.rsplit(".", 1)[-1] == "WandbLogger"


def apply_log_model(trainer_config: Any) -> int:
    """Set ``log_model`` on every W&B logger in a parsed ``trainer`` config that does not set it.

    Returns how many loggers were set (0 when the switch is unset or no W&B logger is configured).
    """
    setting = log_model_setting()
    if setting is None or trainer_config is None:
        return 0
    loggers = trainer_config.get("logger")
    entries = loggers if isinstance(loggers, list) else [loggers]
    changed = 0
    for entry in entries:
        if not _is_wandb_logger(entry):
            continue
        init_args = entry.get("init_args")
        if init_args is None:
            entry["init_args"] = init_args = type(entry)() if not isinstance(entry, dict) else {}
        if init_args.get("log_model") in (None, False):
            init_args["log_model"] = setting
            changed += 1
    return changed
