"""W&B runs a person can find: a name, tags and a group from the run's own settings.

A run's W&B logger that was given none gets, through ``WandbLogger``'s own arguments:

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

from typing import Any

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
