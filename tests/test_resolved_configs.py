"""Every shipped command line resolves to the configuration it resolved to before the restructuring.

tests/fixtures/before_restructuring/resolved_configs.json holds, per command line, the full
configuration the command line of commit 8cde535 instantiated its model, data and trainer with
(after its own adjustments). Class paths are compared by the class they import, so a class that
is still the same class compares equal wherever a path names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import tiedemb.cli as cli_module
from tiedemb.cli import main
from tiedemb.nn.config import ARCHITECTURE, TransformerConfig
from tiedemb.weights.source import HEAD_SETTINGS

pytestmark = pytest.mark.end_to_end  # runs the real command line

ROOT = Path(__file__).resolve().parents[1]
FROZEN = json.loads((ROOT / "tests" / "fixtures" / "before_restructuring" / "resolved_configs.json").read_text())


class Resolved(Exception):
    """Carries the configuration out of the CLI just before it instantiates anything."""


def resolve(args: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    def capture(cli: cli_module.TiedembCLI) -> None:
        raise Resolved(yaml.safe_load(cli.parser.dump(cli.config, skip_none=False))[cli.subcommand])

    monkeypatch.setattr(cli_module.TiedembCLI, "instantiate_classes", capture)
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(Resolved) as resolved:
        main(args)
    return resolved.value.args[0]


MOVED = {"tiedemb.resume.ResumableCheckpoint": "tiedemb.training.checkpoints.ResumableCheckpoint"}
"""Classes the restructuring moved, unchanged, to another module: old class path -> new."""


def class_identity(path: str) -> str:
    """Where the class a class path names is defined."""
    module, _, name = MOVED.get(path, path).rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return f"{cls.__module__}.{cls.__qualname__}"


ADDED = {
    ("data", "init_args", "length_grouping"): 0,
    ("data", "init_args", "sort_eval_by_length"): False,
    ("log_level",): None,
    ("run_name",): None,
    ("data", "init_args", "corpus_seed"): 0,
    ("data", "init_args", "ood_val_files"): None,
    ("data", "init_args", "ood_val_blocks"): None,
    # balanced narrowing keeps the position table; only runs that narrow a pretrained embedding change
    ("model", "init_args", "narrowing"): "balanced",
    ("save_transformers",): False,  # fit --save_transformers: a transformers folder beside the checkpoints
}
"""Options added since, with the default that keeps a configuration as it was: (path) -> default.
A command line that resolves one of them to anything else resolves differently, and fails."""

REMOVED = {
    # GLUE from local files goes through data.data_dir (a classic glue_data folder) alone
    ("data", "init_args", "data_files"): None,
    # LightningCLI's optimiser options: the modules configure their own (auto_configure_optimizers=False)
    ("optimizer",): None,
    ("lr_scheduler",): None,
}
"""Options removed since, with the value every frozen configuration had: (path) -> value. A frozen
configuration that set one to anything else relied on what was removed, and fails."""


def pop_each(config: dict[str, Any], expected: dict[tuple[str, ...], Any], why: str) -> None:
    """Take each option of ``expected`` out of ``config`` where present, checking it held its value."""
    for path, value in expected.items():
        parent = config
        for key in path[:-1]:
            parent = parent.get(key) or {}
        if path[-1] in parent:
            assert parent.pop(path[-1]) == value, f"{'.'.join(path)}: {why} {value!r}"


def without_removed(config: dict[str, Any]) -> dict[str, Any]:
    """The frozen ``config`` without the options removed since, each checked to have been unused."""
    config = json.loads(json.dumps(config))
    pop_each(config, REMOVED, "what it did is gone; every frozen configuration had")
    return config


WANDB_LOGGER = "lightning.pytorch.loggers.WandbLogger"
NAMED_WANDB_ARGS = ("name", "group", "tags", "config")
"""The W&B logger's arguments that once named the run on the W&B page: they change no result."""


def without_added(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the options added since, each checked to hold its neutral default."""
    config = json.loads(json.dumps(config))
    data = (config.get("data") or {}).get("init_args") or {}
    if "seed" in data and data["seed"] is None:
        # data.seed now follows seed_everything when unset, which is what the configs' 0 was
        data["seed"] = config.get("seed_everything")
    pop_each(config, ADDED, "is not its default")
    trainer = config.get("trainer") or {}
    for logger in trainer.get("logger") or []:
        if isinstance(logger, dict) and logger.get("class_path") == WANDB_LOGGER:
            (logger.get("init_args") or {}).update(dict.fromkeys(NAMED_WANDB_ARGS))
    for logger in trainer.get("logger") if isinstance(trainer.get("logger"), list) else []:
        settings = logger.get("init_args") if isinstance(logger, dict) else None
        if settings and settings.get("save_dir") == ".":
            # "." is the run's own folder under trainer.default_root_dir (training/run_dir.py); the
            # default loggers named that root itself before each run had its folder
            settings["save_dir"] = trainer.get("default_root_dir")
    return config


def unset_as_default(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with PretrainModule's architecture and head settings that are unset (null) at the
    config's default, and without its unset ``pretrained``: since PretrainModule takes these from a
    pretrained model, unset is their default, and without a pretrained model it means the config's."""
    model = config.get("model") or {}
    if not str(model.get("class_path", "")).endswith("PretrainModule"):
        return config
    settings = model.get("init_args") or {}
    if "pretrained" in settings:
        assert settings.pop("pretrained") is None, "model.pretrained is not its default None"
    defaults = {
        field.name: field.default
        for field in dataclasses.fields(TransformerConfig)
        if field.default is not dataclasses.MISSING
    }
    for name in [*TransformerConfig.field_names_of(ARCHITECTURE), *HEAD_SETTINGS]:
        if settings.get(name, "set") is None and name in defaults:
            settings[name] = defaults[name]
    return config


MOVED_DATA = ("../shared/data/", "data/")
"""The shipped configs' data paths since ``tiedemb data prepare``: the same files, under the repository's data/."""


def moved_data(value: Any) -> Any:
    """``value`` with each data path the frozen configuration names where the configs now name it."""
    if isinstance(value, dict):
        return {key: moved_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [moved_data(item) for item in value]
    if isinstance(value, str) and value.startswith(MOVED_DATA[0]):
        return MOVED_DATA[1] + value[len(MOVED_DATA[0]) :]
    return value


def canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: class_identity(item) if key == "class_path" else canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


@pytest.mark.parametrize("command", list(FROZEN), ids=lambda command: command.replace("configs/", ""))
def test_a_command_line_resolves_as_before(command, monkeypatch):
    configs = [token for token in command.split() if not token.startswith("--")]
    options = [token for token in command.split() if token.startswith("--")]
    args = ["fit", *[item for config in configs for item in ("--config", str(ROOT / config))], *options]
    resolved = canonical(unset_as_default(without_added(resolve(args, monkeypatch))))
    assert resolved == canonical(moved_data(without_removed(FROZEN[command])))
