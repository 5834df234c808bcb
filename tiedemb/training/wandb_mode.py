"""W&B: whether a run's logger goes online (decided once, within seconds), and one W&B run across resumes.

W&B must never prompt or wait for a server. Without credentials (no ``WANDB_API_KEY``, no
``api.wandb.ai`` entry in ``~/.netrc``) runs are recorded offline, for ``wandb sync`` later. With
credentials the W&B server is probed once (a HEAD request, ``WANDB_PROBE_TIMEOUT_S``): if it does
not answer, the run is recorded offline and one line says so, instead of the logger's own retries
holding the run for minutes. A ``WANDB_MODE`` the user set is always kept.

A resumed run continues the W&B run it resumes: ``WandbRunId`` keeps the run's id in every
checkpoint, and the command line builds the resumed run's ``WandbLogger`` with that ``id`` (and
``resume="allow"``), once the checkpoint is found and before the loggers are built (``tiedemb.cli``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger

from tiedemb.training.hub import url_problem
from tiedemb.training.lightning_internals import unstarted_wandb_init

log = logging.getLogger("tiedemb")

WANDB_ID_KEY = "wandb_run_id"
"""Where checkpoints keep the id of the W&B run that wrote them."""
WANDB_PROBE_TIMEOUT_S = 3.0
"""Seconds to wait for the W&B server before recording offline."""
DEFAULT_BASE_URL = "https://api.wandb.ai"


def has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    host = os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL).split("://")[-1].split("/")[0]
    return netrc.is_file() and host in netrc.read_text(errors="ignore")


def server_problem(timeout: float = WANDB_PROBE_TIMEOUT_S) -> str | None:
    """Why the W&B server cannot be reached, or ``None`` when it answers."""
    problem = url_problem(os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL), timeout)
    return f"the W&B server {problem}" if problem else None


def choose_wandb_mode() -> str | None:
    """Set ``WANDB_MODE=offline`` where a run cannot go online; return the mode set (None: untouched)."""
    if "WANDB_MODE" in os.environ:
        return None
    if not has_credentials():
        os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")  # nothing to link to: keep the log quiet
        return "offline"
    problem = server_problem()
    if problem is not None:
        print(f"{problem}: W&B records this run offline; upload it later with `wandb sync`", file=sys.stderr)
        os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        return "offline"
    return None  # online: W&B prints the run's URL


class WandbRunId(Callback):
    """Keeps the W&B run's id in every checkpoint the run writes."""

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger) and trainer.global_rank == 0:  # other ranks hold no run
                checkpoint[WANDB_ID_KEY] = logger.experiment.id
                return


def wandb_run_id(checkpoint_path: str) -> str | None:
    """The W&B run id a checkpoint keeps, read without loading its tensors."""
    return torch.load(checkpoint_path, map_location="cpu", weights_only=True, mmap=True).get(WANDB_ID_KEY)


def quiet_wandb_start(loggers: Sequence[Logger]) -> None:
    """Spare a W&B logger's start two warnings that say nothing about the user's run.

    Lightning's ``WandbLogger`` always passes ``anonymous`` to ``wandb.init``, as None when the user
    set nothing, and W&B (0.2x on) then warns that the setting has no effect: the unset value is
    left out (one the user gave is kept, and W&B's word on it). W&B looks for a git repository from
    the logger's ``save_dir`` before it creates that folder, and warns when it is missing: the
    folder is made first.
    """
    for logger in loggers:
        if not isinstance(logger, WandbLogger):
            continue
        init = unstarted_wandb_init(logger)
        if init is not None and "anonymous" in init and init["anonymous"] is None:
            del init["anonymous"]
        if logger.save_dir:
            os.makedirs(logger.save_dir, exist_ok=True)
