"""User mistakes (a config value, a path, a file's contents) raise a ``UserError``: the command line prints
its message alone and exits 2; everything else is a bug and keeps its traceback."""

from __future__ import annotations

from collections.abc import Iterable


class UserError(ValueError):
    """A mistake in the configuration or the inputs, explained in one message."""


def check_choice(parameter: str, value: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise naming the valid ones."""
    choices = list(choices)
    if value not in choices:
        raise UserError(f"{parameter}={value!r} is not a known choice; valid: {', '.join(choices)}")
    return value


def first_line(error: BaseException) -> str:
    """The first line of an error message, without a final full stop, for embedding in a sentence."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
