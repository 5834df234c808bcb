"""W&B online or offline, decided within seconds: offline without credentials, or when the server
does not answer (said in one line); a ``WANDB_MODE`` the user set is kept. The mode goes to the
logger (``mode=``); the environment is left alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lightning.pytorch.loggers import Logger, WandbLogger

from tiedemb.training.hub import url_problem

WANDB_PROBE_TIMEOUT_S = 3.0
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


def make_wandb_folders(loggers: Sequence[Logger]) -> None:
    """Make each W&B logger's save folder before its run starts (W&B warns when it is missing)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger.save_dir:
            os.makedirs(logger.save_dir, exist_ok=True)
