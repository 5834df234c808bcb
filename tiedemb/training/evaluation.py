"""Evaluating a checkpoint alone: ``test --ckpt_path FILE`` (or ``test RUN_DIR``) with no config, from any folder.

``validate``, ``test`` and ``predict`` rebuild the model and data a checkpoint records (each override said
in one line), relative data locations relative to the folder the run started in, and the run's own Trainer
limits (its ``config.yaml``): ``validate`` scores what its run did.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from tiedemb.errors import UserError
from tiedemb.options import as_written, parameters_of
from tiedemb.training.checkpoints import comparable, differences
from tiedemb.training.hub import spelled_as_path
from tiedemb.training.run_dir import run_checkpoint

log = logging.getLogger("tiedemb")

EVALUATING = ("validate", "test", "predict")
NAMED_CHECKPOINTS = ("last", "best", "hpc")
"""``--ckpt_path`` values that name a checkpoint to be found, not a file."""
RUN_FOLDER_KEY = "run_folder"

LOCATIONS = {
    "data_dir": "<folder>",
    "tokenizer": "<folder>",
    "data_files": "'{split: <file>, ...}'",
    "train_files": "'[<file>, ...]'",
    "val_files": "'[<file>, ...]'",
    "ood_val_files": "'[<file>, ...]'",
    "cache_dir": None,
}
"""Data settings that are locations, and how a replacement is written (None: a cache, made afresh)."""
READS_TEXT = ("dataset", "data_dir", "data_files", "train_files", "val_files", "ood_val_files")
"""Data settings that name text to read: only a run that read text used its cache."""
RUN_LIMITS = ("limit_val_batches", "limit_test_batches", "limit_predict_batches")
"""Trainer settings that decide which batches an evaluation scores, restored from the run's config.yaml."""


class RunFolder(Callback):
    """Records, in every checkpoint, the folder the run started in (its relative data locations' base)."""

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[RUN_FOLDER_KEY] = os.getcwd()


# --------------------------------------------------------------------------- the command line


def option_values(argv: Sequence[str], option: str) -> list[str]:
    """The values ``--option=V`` or ``--option V`` give on a command line, in order (jsonargparse takes the last)."""
    values = []
    for index, argument in enumerate(argv):
        if argument.startswith(f"{option}="):
            values.append(argument[len(option) + 1 :])
        elif argument == option and index + 1 < len(argv):
            values.append(argv[index + 1])
    return values


def given_keys(argv: Sequence[str], group: str) -> set[str]:
    """The settings of ``group`` (``model``, ``data``) a command line gives one by one (``--data.batch_size=8``)."""
    prefix = f"--{group}."
    names = [argument[len(prefix) :].split("=", 1)[0] for argument in argv if argument.startswith(prefix)]
    return {name.removeprefix("init_args.").split(".", 1)[0] for name in names}


def checkpoint_to_evaluate(argv: Sequence[str]) -> str | None:
    """The checkpoint file an evaluating command line names, read before parsing: it names the classes."""
    if not argv or argv[0] not in EVALUATING:
        return None
    path = (option_values(argv, "--ckpt_path") or [None])[-1]
    return None if not path or path in NAMED_CHECKPOINTS or "://" in path else path


def with_run_checkpoint(argv: Sequence[str]) -> list[str]:
    """An evaluating command line with a run's folder (or a checkpoint file) given first as ``--ckpt_path``."""
    argv = [str(argument) for argument in argv]
    if len(argv) < 2 or argv[0] not in EVALUATING or argv[1].startswith("-"):
        return argv
    given = Path(argv[1]).expanduser()
    if not given.exists():
        raise UserError(
            f"{argv[0]} {argv[1]}: no such run folder or checkpoint file (give a run's folder, e.g. runs/<name>, "
            "or --ckpt_path=<file>)"
        )
    path = run_checkpoint(given) if given.is_dir() else given
    if str(path) != argv[1]:  # said before any process of a DDP run starts
        print(f"evaluating {path}", file=sys.stderr)
    return [argv[0], f"--ckpt_path={path}", *argv[2:]]


def run_limits(checkpoint_path: str | os.PathLike) -> dict[str, Any]:
    """The Trainer limits (``RUN_LIMITS``) the run that wrote a checkpoint set, from its ``config.yaml``."""
    import yaml

    folder = Path(checkpoint_path).expanduser().resolve().parent
    config = folder.parent / "config.yaml"
    if folder.name != "checkpoints" or not config.is_file():
        return {}
    try:
        trainer = yaml.safe_load(config.read_text()).get("trainer") or {}
    except (OSError, yaml.YAMLError, AttributeError):  # unreadable, or not a mapping
        return {}
    return {name: trainer[name] for name in RUN_LIMITS if isinstance(trainer, dict) and trainer.get(name) is not None}


def weights_only_given(argv: Sequence[str]) -> bool:
    """``--weights_only`` as the command line gives it (true unless it says false)."""
    return str((option_values(argv, "--weights_only") or [None])[-1]).lower() not in ("false", "0", "no", "off")


# --------------------------------------------------------------------------- what the checkpoint records


def recorded(checkpoint: Mapping[str, Any], key: str) -> tuple[str | None, dict[str, Any]]:
    """The class path and the settings a checkpoint records under ``key`` (``hyper_parameters``, ...)."""
    settings = dict(checkpoint.get(key) or {})
    class_path = settings.pop("_class_path", None)
    return class_path, {name: value for name, value in settings.items() if not name.startswith("_")}


def recorded_defaults(checkpoint: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The model and data classes (and the data's settings) a checkpoint records, as parser defaults."""
    defaults: dict[str, Any] = {}
    model_class, _ = recorded(checkpoint, "hyper_parameters")
    if model_class:
        defaults["model"] = {"class_path": model_class}
    data_class, data = recorded(checkpoint, "datamodule_hyper_parameters")
    if data_class:
        known = parameters_of(data_class)
        if known is not None:
            for name in sorted(set(data) - set(known)):
                log.warning("checkpoint %r records data.%s, which %s no longer takes; left out", path, name, data_class)
            data = {name: value for name, value in data.items() if name in known}
        defaults["data"] = {"class_path": data_class, "init_args": data}
    return defaults


def run_folder(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> Path | None:
    """The folder the run started in, as it is now: from the callbacks' relative ``dirpath``, else as recorded."""
    folder = Path(path).expanduser().resolve().parent
    for state in (checkpoint.get("callbacks") or {}).values():
        dirpath = state.get("dirpath") if isinstance(state, Mapping) else None
        if not dirpath or Path(dirpath).is_absolute():
            continue
        parts = Path(os.path.normpath(dirpath)).parts
        if ".." not in parts and folder.parts[-len(parts) :] == parts:
            return Path(*folder.parts[: -len(parts)])
    started = checkpoint.get(RUN_FOLDER_KEY)
    if started and Path(started).is_dir():
        return Path(started)
    return None


# --------------------------------------------------------------------------- overrides and locations


def override_lines(
    group: str, recorded_settings: Mapping[str, Any], settings: Mapping[str, Any], given: set[str]
) -> list[str]:
    """One line per setting that differs from the recorded one: ``data.batch_size: 32 (checkpoint) -> 8 (config)``."""
    return [
        f"{group}.{name}: {as_written(old)} (checkpoint) -> {as_written(new)} "
        f"({'command line' if name in given else 'config'})"
        for name, (old, new) in differences(recorded_settings, settings, ()).items()
    ]


def locate(value: str, folder: Path | None) -> str | None:
    """Where a recorded location (or glob) is now, or None: a relative one in the run's folder (made
    absolute), then in the current folder."""
    path = Path(value).expanduser()
    elsewhere = not path.is_absolute() and folder is not None and folder.resolve() != Path.cwd().resolve()
    candidates = [(folder / path).resolve(), path] if elsewhere else [path]
    found = next((where for where in candidates if where.exists() or glob.glob(str(where))), None)
    return None if found is None else value if found == path else str(found)


def rebuilt_locations(
    settings: Mapping[str, Any], recorded_settings: Mapping[str, Any], folder: Path | None
) -> dict[str, Any]:
    """The recorded data locations the run's settings still hold, as found now (absolute paths); one the
    user gave is the data module's to check."""
    reads_text = any(recorded_settings.get(name) for name in READS_TEXT)
    found: dict[str, Any] = {}
    for name, remedy in LOCATIONS.items():
        value = settings.get(name)
        if value is None or name not in recorded_settings or comparable(value) != comparable(recorded_settings[name]):
            continue
        if remedy is None and not reads_text:
            continue  # nothing was cached; the data module refuses a cache it would not use
        if isinstance(value, Mapping):
            found[name] = {split: placed(name, item, folder) for split, item in value.items()}
        elif isinstance(value, (list, tuple)):
            found[name] = [placed(name, item, folder) for item in value]
        else:
            found[name] = placed(name, value, folder)
    return {name: value for name, value in found.items() if comparable(value) != comparable(settings[name])}


def placed(name: str, value: Any, folder: Path | None) -> str:
    """Where the recorded location ``value`` of ``data.<name>`` is now; one missing is a ``UserError``."""
    where = locate(str(value), folder)
    remedy = LOCATIONS[name]
    if where is None and remedy is not None and (name != "tokenizer" or spelled_as_path(str(value))):
        absolute = Path(str(value)).expanduser().is_absolute() or folder is None
        relative = "" if absolute else f" (relative to the run's folder {str(folder)!r})"
        raise UserError(
            f"the checkpoint's data.{name} {str(value)!r}{relative} does not exist here; pass --data.{name}={remedy}"
        )
    return where or value
