"""What an option accepts, declared with jsonargparse's restricted types (``batch_size: PositiveInt = 32``),
which jsonargparse (and argparse, as a ``type``) checks. An option the configuration would not read is
refused (``no_effect``) or warned about (``warn_no_effect``), never dropped silently.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import typing
import warnings
from functools import partial
from typing import Any

from jsonargparse import typing as restricted_types

from tiedemb.errors import UserError


def checked(restricted: type, kind: type, value: Any) -> int | float:
    return kind(restricted(value))


def plain_values(restricted: type) -> type:
    """A jsonargparse restricted number type whose values jsonargparse checks and gives on as plain ints or
    floats: they end up in checkpoints, which must hold plain values to load with ``weights_only``."""
    kind = float if issubclass(restricted, float) else int
    restricted_types.register_type(restricted, serializer=kind, deserializer=partial(checked, restricted, kind))
    return restricted


def at_least(low: int) -> type:
    """The integers from ``low`` on (``block_size: at_least(2)``)."""
    return plain_values(restricted_types.restricted_number_type(f"AtLeast{low}", int, (">=", low)))


PositiveInt = plain_values(restricted_types.PositiveInt)
NonNegativeInt = plain_values(restricted_types.NonNegativeInt)
PositiveFloat = plain_values(restricted_types.PositiveFloat)
NonNegativeFloat = plain_values(restricted_types.NonNegativeFloat)
AtLeastTwo = at_least(2)
UnitFraction = plain_values(restricted_types.ClosedUnitInterval)
"""A share of something, 0 and 1 included (``min_lr_ratio``)."""
Rate = plain_values(restricted_types.restricted_number_type("Rate", float, [(">=", 0), ("<", 1)]))
"""A probability that may be 0 but not 1 (dropout: 1 would drop everything)."""
OpenFraction = plain_values(restricted_types.OpenUnitInterval)
"""Strictly between 0 and 1 (the share of tokens masked, of text held out)."""


def class_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """A class's options as LightningCLI shows them: the keyword parameters of its ``__init__`` and
    of each parent's ``__init__`` that it passes ``**kwargs`` on to, private ones (``_name``) left out."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            signature = inspect.signature(init, eval_str=True)  # annotations as types, not text
        except NameError:  # a name imported for type checkers only
            signature = inspect.signature(init)
        parameters = list(signature.parameters.values())[1:]  # without self
        for parameter in parameters:
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY) and parameter.name[0] != "_":
                found.setdefault(parameter.name, parameter)  # a subclass's own declaration first
        if all(parameter.kind is not parameter.VAR_KEYWORD for parameter in parameters):
            break
    return found


def parameters_of(class_path: str) -> dict[str, inspect.Parameter] | None:
    """``class_parameters`` of the class a dotted path names, or None when it cannot be imported
    (jsonargparse reports an unknown class)."""
    module_name, _, class_name = class_path.rpartition(".")
    try:
        return class_parameters(getattr(importlib.import_module(module_name), class_name))
    except (ImportError, AttributeError, ValueError):
        return None


def refuse_null(group: str, spec: Any) -> None:
    """Refuse ``null`` for a class's option whose type has no ``None``: jsonargparse passes ``null`` on
    unchecked for the options of a class given by ``class_path`` (``group``: ``model`` or ``data``)."""
    parameters = parameters_of(str(spec.get("class_path", ""))) or {}
    for name, value in (spec.get("init_args") or {}).items():
        parameter = parameters.get(name)
        if value is None and parameter is not None and parameter.default is not None:
            kind = parameter.annotation
            if kind is not Any and type(None) not in typing.get_args(kind):
                raise UserError(f"{group}.{name} must be a {getattr(kind, '__name__', kind)}, got null")


def as_written(value: Any) -> str:
    """A value as the user wrote it in YAML or on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


# -- options the configuration would not read -----------------------------------------------------
def changed_from_default(value: Any, default: Any) -> bool:
    """Whether an option was set: neither ``null`` (unset) nor ``default``, what leaving it out gives."""
    return value is not None and value != default


def no_effect_message(option: str, value: Any, why: str) -> str:
    """``data.tokenizer='x' has no effect without ...``: the option, its value and why it is not read."""
    return f"{option}={as_written(value)} has no effect {why}"


def no_effect(option: str, value: Any, why: str) -> UserError:
    """The error refusing an option that would change nothing (``raise no_effect(...)``)."""
    return UserError(no_effect_message(option, value, why))


class NoEffectWarning(UserWarning):
    """An option that changes nothing in this configuration, kept because configs compose."""


def warn_no_effect(option: str, value: Any, why: str) -> None:
    """Say once (Python's warning registry) that an option changes nothing here."""
    warnings.warn(no_effect_message(option, value, why), NoEffectWarning, stacklevel=3)


# -- the argparse commands' switches --------------------------------------------------------------
def true_or_false(text: str) -> bool:
    """An argparse ``type`` reading a switch's value: true/false (also 1/0, yes/no)."""
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_weights_only(parser: argparse.ArgumentParser) -> None:
    """``--weights-only``, as every command that reads a checkpoint file takes it (the training
    command's ``--weights_only`` is Lightning's, with the same meaning)."""
    parser.add_argument(
        "--weights-only",
        type=true_or_false,
        default=True,
        help="read tensors and plain values only (default true); false unpickles anything, for a file you trust",
    )
