"""The private names of Lightning and jsonargparse that tiedemb relies on, checked against the
installed versions.

docs/architecture.md ("Private touch points") lists each with the reason no public API serves.
An upgrade that renames or reshapes one fails here, naming it, instead of changing the behaviour
built on it without a word. What each is for is tested where that behaviour is (test_user_errors.py).
"""

from __future__ import annotations

import argparse
import inspect

import lightning as L
import pytest
import torch
from jsonargparse import ArgumentError
from jsonargparse import ArgumentParser as JsonArgumentParser

from tiedemb.training.arguments import NO_CLASS, condense_parse_error, nearest_valid_key

PRIVATE_OVERRIDES: dict[str, list[str]] = {}
"""The private methods of a library class that a tiedemb subclass overrides: none."""
LIBRARIES = ("lightning", "jsonargparse", "argparse")


def test_no_other_private_method_of_lightning_or_jsonargparse_is_overridden():
    """A private name of ours that a library class also defines replaces the library's without a word,
    also when a later release adds that name; only the listed overrides may do so."""
    import importlib
    import pkgutil

    import tiedemb

    modules = ["tiedemb.cli"]
    for package in ("training", "modules", "data"):
        found = importlib.import_module(f"tiedemb.{package}").__path__
        modules += [info.name for info in pkgutil.iter_modules(found, f"tiedemb.{package}.")]
    overrides = {}
    for module in map(importlib.import_module, modules):
        for cls in vars(module).values():
            if not inspect.isclass(cls) or not cls.__module__.startswith(tiedemb.__name__):
                continue
            bases = [base for base in cls.__mro__[1:] if base.__module__.split(".")[0] in LIBRARIES]
            own = [name for name in vars(cls) if name.startswith("_") and not name.startswith("__")]
            # _abc_impl: ABCMeta's own record on every abstract class
            shadowed = sorted(name for name in own if name != "_abc_impl" and any(name in vars(b) for b in bases))
            if shadowed:
                overrides[f"{cls.__module__}.{cls.__name__}"] = shadowed
    assert overrides == PRIVATE_OVERRIDES


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


# -- 1. jsonargparse's error report ------------------------------------------------------------------
def parse_error(parser: JsonArgumentParser, args: list[str]) -> str:
    with pytest.raises(ArgumentError) as raised:
        parser.parse_args(args)
    return str(raised.value)


def test_jsonargparses_error_text_is_what_the_short_report_is_read_from(tmp_path):
    plain = JsonArgumentParser(exit_on_error=False)
    plain.add_argument("--config", action="config")
    plain.add_argument("--size", type=int | None)
    plain.add_argument("--max_steps", type=int, default=1)
    assert condense_parse_error(parse_error(plain, ["--size=abc"])) == "--size: expected int or null, got abc"
    assert nearest_valid_key(parse_error(plain, ["--max_stepz=3"]), plain) == "max_steps"
    config = tmp_path / "typo.yaml"
    config.write_text("max_stepz: 3\n")
    assert parse_error(plain, ["--config", str(config)]) == "Option 'max_stepz' is not accepted"

    classes = JsonArgumentParser(exit_on_error=False)
    classes.add_subclass_arguments(torch.optim.Optimizer, "optimizer", required=True)
    typo = parse_error(classes, ["--optimizer=torch.optim.SGD", "--optimizer.init_args.lrr=0.1"])
    assert nearest_valid_key(typo, classes) == "lr", typo
    bad = parse_error(classes, ["--optimizer=torch.optim.SGD", "--optimizer.init_args.momentum=abc"])
    assert condense_parse_error(bad) == "--optimizer.momentum: Expected float. Got value: abc", bad
    assert NO_CLASS.search(parse_error(classes, [])) is None
    modules = JsonArgumentParser(exit_on_error=False)
    modules.add_subclass_arguments(L.LightningModule, "model", required=True)
    assert NO_CLASS.search(parse_error(modules, [])), "jsonargparse words a missing model class otherwise"

    # The parser an error in a subcommand is reported against, and the option names a typo is matched to.
    assert "subcommand_parser" in inspect.getsource(JsonArgumentParser.error)
    assert all(isinstance(action, argparse.Action) for action in plain._actions)
