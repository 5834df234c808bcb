"""How every command ends on a user's mistake (a ``UserError``): ``error: <message>`` on stderr, no
traceback, exit status 2 (``report_user_errors``). ``TIEDEMB_DEBUG=1`` re-raises user errors too.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from tiedemb.errors import UserError

DEBUG_ENV = "TIEDEMB_DEBUG"
USER_ERROR_EXIT = 2
PREEMPTED_EXIT = 143
"""The exit status of a run stopped by SIGTERM (128 + 15), not Lightning's 0: a sweep then records the
cell as preempted, to be resumed."""

T = TypeVar("T")


def find_user_error(error: BaseException) -> BaseException | None:
    """The ``UserError`` (or Lightning's ``MisconfigurationException``) behind ``error``, which
    jsonargparse and Lightning wrap."""
    # Looked up, not imported: a command that never loaded Lightning cannot have raised its exception.
    lightning_errors = sys.modules.get("lightning.fabric.utilities.exceptions")
    kinds: tuple[type[BaseException], ...] = (UserError,)
    if lightning_errors is not None:
        kinds += (lightning_errors.MisconfigurationException,)
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kinds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def dashed(option: str) -> str:
    """A long option as tiedemb's own commands spell it: ``--push_to_hub`` -> ``--push-to-hub``."""
    return "--" + option[2:].replace("_", "-")


def report_user_errors(action: Callable[[], T]) -> T | int:
    """``action()``'s result, or ``USER_ERROR_EXIT`` after printing the user error it raised."""
    try:
        return action()
    except Exception as error:
        user_error = find_user_error(error)
        if user_error is None or os.environ.get(DEBUG_ENV):
            raise
        print(f"error: {user_error}", file=sys.stderr)
        return USER_ERROR_EXIT


class CommandParser(argparse.ArgumentParser):
    """argparse reporting a mistake as ``error: ...`` and a hint, exit 2; options spelled with dashes
    (``--dry-run``), the underscore spelling (``--dry_run``) a hidden alias."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._aliases: dict[str, str] = {}

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        spelled = [dashed(name) if isinstance(name, str) and name.startswith("--") else name for name in names]
        action = super().add_argument(*spelled, **kwargs)
        for name in action.option_strings:
            if name.startswith("--") and "-" in name[2:]:
                self._aliases[name[:2] + name[2:].replace("-", "_")] = name
        return action

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        tokens = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self.canonical(tokens), namespace)

    def canonical(self, tokens: list[str]) -> list[str]:
        """``tokens`` with each aliased option spelled as ``--help`` shows it."""
        spelled = []
        for index, token in enumerate(tokens):
            if token == "--":  # what follows are values, whatever they look like
                return spelled + tokens[index:]
            name, equals, value = token.partition("=")
            spelled.append(self._aliases.get(name, name) + equals + value if token.startswith("--") else token)
        return spelled

    def error(self, message: str) -> NoReturn:
        if os.environ.get(DEBUG_ENV):
            super().error(message)
        message = message[len("argument ") :] if message.startswith("argument ") else message
        sys.stderr.write(f"error: {message}\nhint: run `{self.prog} --help` for the options\n")
        self.exit(USER_ERROR_EXIT)
