"""W&B: whether a run's logger goes online (decided once, within seconds), and one W&B run across resumes.

W&B must never prompt or wait for a server. Without credentials (no ``WANDB_API_KEY``, no
``api.wandb.ai`` entry in ``~/.netrc``) runs are recorded offline, for ``wandb sync`` later. With
credentials the W&B server is probed once (a HEAD request, ``WANDB_PROBE_TIMEOUT_S``): if it does
not answer, the run is recorded offline and one line says so, instead of the logger's own retries
holding the run for minutes. A ``WANDB_MODE`` the user set is always kept. The command line passes
the mode to its ``WandbLogger`` (``mode=``, which goes to ``wandb.init``); the environment is left as it is.

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


def wandb_mode() -> str | None:
    """``"offline"`` where a run cannot go online (said in one line when the server does not answer);
    None where W&B decides: a ``WANDB_MODE`` the user set, or credentials and a server that answers."""
    if "WANDB_MODE" in os.environ:
        return None
    if not has_credentials():
        return "offline"
    problem = server_problem()
    if problem is not None:
        print(f"{problem}: W&B records this run offline; upload it later with `wandb sync`", file=sys.stderr)
        return "offline"
    return None  # online: W&B prints the run's URL


def choose_wandb_mode() -> str | None:
    """Set ``WANDB_MODE=offline`` where a W&B run made with ``wandb.init`` cannot go online (the report's
    run, in a process of its own); return the mode set (None: untouched)."""
    mode = wandb_mode()
    if mode is not None:
        os.environ["WANDB_MODE"] = mode
        os.environ.setdefault("WANDB_SILENT", "true")  # nothing to link to: keep the log quiet
    return mode


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


def make_wandb_folders(loggers: Sequence[Logger]) -> None:
    """Make each W&B logger's save folder before its run starts.

    W&B looks for a git repository from that folder before it creates it, and warns when it is
    missing. (Its other start-up warning, that the ``anonymous`` setting Lightning always passes has
    no effect, is W&B's word on Lightning's call and is left to them.)
    """
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger.save_dir:
            os.makedirs(logger.save_dir, exist_ok=True)
