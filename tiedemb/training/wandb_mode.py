"""W&B: whether a run's logger goes online (decided once, within seconds), one W&B run across resumes,
and a name, group and tags a person can find it by.

W&B must never prompt or wait for a server. Without credentials (no ``WANDB_API_KEY``, no
``api.wandb.ai`` entry in ``~/.netrc``) runs are recorded offline, for ``wandb sync`` later. With
credentials the W&B server is probed once (a HEAD request, ``WANDB_PROBE_TIMEOUT_S``): if it does
not answer, the run is recorded offline and one line says so, instead of the logger's own retries
holding the run for minutes. A ``WANDB_MODE`` the user set is always kept. The command line passes
the mode to its ``WandbLogger`` (``mode=``, which goes to ``wandb.init``); the environment is left as it is.

A resumed run continues the W&B run it resumes: ``WandbRunId`` keeps the run's id in every
checkpoint, and the command line builds the resumed run's ``WandbLogger`` with that ``id`` (and
``resume="allow"``), once the checkpoint is found and before the loggers are built (``tiedemb.cli``).

A run's W&B logger that was given no name, group or tags gets, through ``WandbLogger``'s own arguments:

* ``name``: ``<variant> <objective> d_e=<width> seed=<seed>`` (a GLUE run: ``<task> d_e=... seed=...``);
* ``group``: the same without the seed, so the seeds of one setting are one group (W&B draws
  their mean and spread as one line);
* ``tags``: ``head=...``, ``objective=...``, ``task=...``, ``d_e=...``, ``seed=...``;
* ``config``: ``d_e`` and ``seed_everything``, beside the module's settings the logger records
  anyway, so W&B's workspace can group, filter and plot by them.

A name, group or tags set in a config or on the command line are kept; sweep cells set their
own (study and cell, ``experiments/cells.py``), and get only the ``config`` entries added.
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


# --------------------------------------------------------------------------- names, groups and tags

WANDB_LOGGER = "lightning.pytorch.loggers.WandbLogger"
D_E_KEY = "d_e"
"""The W&B config key of a run's embedding width."""
SEED_KEY = "seed_everything"
"""The W&B config key of a run's seed (the data module's own ``seed`` setting is in the config too)."""
HEAD_KEY = "head"
"""The W&B config key of a language model's head: the module's setting, which the logger records."""


def run_labels(config: Any) -> dict[str, str]:
    """head, objective, task, d_e and seed of a parsed run configuration, where they are known."""
    model = _get(config, "model") or {}
    settings = {**_as_dict(_get(model, "init_args")), **_as_dict(_get(model, "dict_kwargs"))}
    data = _as_dict(_get(_get(config, "data") or {}, "init_args"))
    labels: dict[str, str] = {}
    task = settings.get("task") or data.get("task")
    if task:
        labels["task"] = str(task)
    elif settings.get("head"):
        labels["head"] = str(settings["head"])
        if settings.get("objective"):
            labels["objective"] = str(settings["objective"])
    width = settings.get("embedding_dim") or settings.get("hidden_size")
    if width:
        labels["d_e"] = str(width)
    seed = _get(config, "seed_everything")
    if seed is not None and seed is not False:
        labels["seed"] = str(seed)
    return labels


def name_wandb_runs(config: Any) -> None:
    """Give every W&B logger in ``config.trainer.logger`` the name, group, tags and config it lacks."""
    loggers = _get(_get(config, "trainer") or {}, "logger")
    if not isinstance(loggers, list):
        loggers = [loggers]
    labels = run_labels(config)
    if not labels:
        return
    shown = [labels.get("task") or labels.get("head"), labels.get("objective")]
    group = " ".join(filter(None, [*shown, f"d_e={labels['d_e']}" if "d_e" in labels else None]))
    name = " ".join(filter(None, [group, f"seed={labels['seed']}" if "seed" in labels else None]))
    for logger in loggers:
        if _get(logger, "class_path") != WANDB_LOGGER:
            continue
        init = _get(logger, "init_args")
        if init is None:
            continue
        if not _get(init, "name") and name:
            init["name"] = name
        if not _get(init, "group") and group:
            init["group"] = group
        if not _get(init, "tags"):
            init["tags"] = [f"{key}={value}" for key, value in labels.items()]
        extra = {
            key: int(labels[label])
            for key, label in ((D_E_KEY, "d_e"), (SEED_KEY, "seed"))
            if labels.get(label, "").isdigit()
        }
        init["config"] = {**extra, **_as_dict(_get(init, "config"))}


def _get(container: Any, key: str) -> Any:
    if container is None:
        return None
    if isinstance(container, dict):
        return container.get(key)
    getter = getattr(container, "get", None)
    return getter(key) if callable(getter) else getattr(container, key, None)


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    as_dict = getattr(value, "as_dict", None)
    return dict(as_dict()) if callable(as_dict) else {}
