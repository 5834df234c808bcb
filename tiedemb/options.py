"""What an option accepts, declared with its type (``batch_size: PositiveInt = 32``), and the one check
of a value against it: ``check_arguments``, called first thing in the configurable classes' ``__init__``
(jsonargparse passes ``null`` on where the type forbids it). An option the configuration would not read
is refused (``no_effect``) or warned about (``warn_no_effect``), never dropped silently.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import math
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from tiedemb.errors import UserError, check_choice


@dataclass(frozen=True)
class Bounds:
    """The closed or open interval a number must lie in; ``None``: unbounded on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None and (value > self.high or (self.high_open and value == self.high)))

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return ""


PositiveInt = Annotated[int, Bounds(1)]
NonNegativeInt = Annotated[int, Bounds(0)]
PositiveFloat = Annotated[float, Bounds(0, low_open=True)]
NonNegativeFloat = Annotated[float, Bounds(0)]
UnitFraction = Annotated[float, Bounds(0, 1)]
"""A share of something, 0 and 1 included (``min_lr_ratio``)."""
Rate = Annotated[float, Bounds(0, 1, high_open=True)]
"""A probability that may be 0 but not 1 (dropout: 1 would drop everything)."""
OpenFraction = Annotated[float, Bounds(0, 1, low_open=True, high_open=True)]
"""Strictly between 0 and 1 (the share of tokens masked, of text held out)."""


# -- the check -----------------------------------------------------------------------------------
def _inits(cls: type) -> list[Callable[..., Any]]:
    """``cls.__init__`` and each parent's ``__init__`` it passes ``**kwargs`` on to (as jsonargparse follows them)."""
    inits = []
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        inits.append(init)
        if all(
            parameter.kind is not parameter.VAR_KEYWORD for parameter in inspect.signature(init).parameters.values()
        ):
            break
    return inits


def class_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """A class's options as LightningCLI shows them: the keyword parameters of its ``__init__`` and
    of each parent's ``__init__`` that it passes ``**kwargs`` on to, private ones (``_name``) left out."""
    found: dict[str, inspect.Parameter] = {}
    for init in _inits(cls):
        for name, parameter in list(inspect.signature(init).parameters.items())[1:]:  # without self
            if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY) and name[0] != "_":
                found.setdefault(name, parameter)  # a subclass's own declaration first
    return found


def parameters_of(class_path: str) -> dict[str, inspect.Parameter] | None:
    """``class_parameters`` of the class a dotted path names, or None when it cannot be imported
    (jsonargparse reports an unknown class)."""
    module_name, _, class_name = class_path.rpartition(".")
    try:
        return class_parameters(getattr(importlib.import_module(module_name), class_name))
    except (ImportError, AttributeError, ValueError):
        return None


def option_types(function: Callable[..., Any] | type) -> dict[str, Any]:
    """The annotations of a function's parameters (of a dataclass: its fields'; of another class: its
    options'), ``Annotated`` kept, string annotations resolved."""
    if dataclasses.is_dataclass(function):
        return typing.get_type_hints(function, include_extras=True)
    if isinstance(function, type):
        found: dict[str, Any] = {}
        for init in _inits(function):
            for name, hint in option_types(init).items():
                found.setdefault(name, hint)
        return {name: found[name] for name in class_parameters(function) if name in found}
    signature = inspect.signature(function)
    hints = typing.get_type_hints(function, include_extras=True)
    return {
        name: hints[name]
        for name, parameter in signature.parameters.items()
        if name in hints and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    }


def check_arguments(prefix: str, types_: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Raise a ``UserError`` for the first argument its annotation does not accept (``prefix``: how users
    name the options, ``model``, ``data``; arguments without an annotation are not checked)."""
    for name, value in arguments.items():
        if name in types_ and not accepts(types_[name], value):
            choices = literal_choices(types_[name])
            if choices and value is not None:  # a name: said the way every choice is (tiedemb.errors)
                check_choice(f"{prefix}.{name}", value, choices)
            raise UserError(f"{prefix}.{name} must be {describe(types_[name])}, got {as_written(value)}")


def literal_choices(hint: Any) -> tuple[Any, ...]:
    """The values a ``Literal`` annotation (alone, or in a union with ``None``) allows; () for other types."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return arguments
    if origin in (Union, types.UnionType):
        return tuple(choice for option in arguments for choice in literal_choices(option))
    return ()


def accepts(hint: Any, value: Any) -> bool:
    """Whether ``value`` is of the annotated type and within its bounds."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in arguments)
    if origin is Annotated:
        return accepts(arguments[0], value) and all(
            value in bound for bound in arguments[1:] if isinstance(bound, Bounds)
        )
    if origin in (Union, types.UnionType):
        return any(accepts(option, value) for option in arguments)
    if hint is type(None) or hint is None:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple:
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(arguments)
            and all(accepts(item_hint, item) for item_hint, item in zip(arguments, value))
        )
    if origin is list:
        return isinstance(value, (list, tuple)) and all(accepts(arguments[0], item) for item in value)
    if origin is dict:
        return isinstance(value, Mapping) and all(
            accepts(arguments[0], key) and accepts(arguments[1], item) for key, item in value.items()
        )
    return True  # a class or Any: what the option does with it decides


def describe(hint: Any) -> str:
    """What an annotation accepts, in words: ``an integer >= 1, or null``."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        bounds = " ".join(bound.describe() for bound in arguments[1:] if isinstance(bound, Bounds))
        return f"{describe(arguments[0])} {bounds}".strip()
    if origin in (Union, types.UnionType):
        kinds = sorted(arguments, key=lambda option: option is type(None))  # null last
        return ", or ".join(describe(option) for option in kinds)
    if hint is type(None) or hint is None:
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(as_written(choice) for choice in arguments)
    names = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}
    if hint in names:
        return names[hint]
    if origin is tuple:
        return (
            f"a list of {len(arguments)} values, each {describe(arguments[0])}"
            if len(set(arguments)) == 1
            else "a list of " + ", ".join(describe(item) for item in arguments)
        )
    if origin is list:
        return f"a list, each item {describe(arguments[0])}"
    if origin is dict:
        return f"a mapping from {describe(arguments[0])} to {describe(arguments[1])}"
    return getattr(hint, "__name__", str(hint))


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


# -- the argparse commands' numbers ---------------------------------------------------------------
class number_type:
    """An argparse ``type`` reading one number the annotation ``hint`` (kept on it) accepts."""

    def __init__(self, hint: Any) -> None:
        self.hint = hint
        self.kind = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
        self.__name__ = describe(hint)  # what argparse names the type in its own messages

    def __call__(self, text: str) -> float:
        try:
            value = self.kind(text)
        except ValueError:
            value = text
        if not accepts(self.hint, value):
            raise argparse.ArgumentTypeError(f"must be {describe(self.hint)}, got {text!r}")
        return value


def true_or_false(text: str) -> bool:
    """An argparse ``type`` reading a switch's value: true/false (also 1/0, yes/no)."""
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_weights_only(parser: argparse.ArgumentParser) -> None:
    """``--weights-only``, as every command that reads a checkpoint file takes it (the training
    command's ``--weights_only`` is Lightning's, with the same meaning; tiedemb's own commands take
    that spelling too)."""
    parser.add_argument(
        "--weights-only",
        type=true_or_false,
        default=True,
        help="read tensors and plain values only (default true); false unpickles anything, for a file you trust",
    )
