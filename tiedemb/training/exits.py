"""How every command talks to its user: a mistake (a ``UserError``) ends it with ``error: <message>`` on
stderr, no traceback, exit status 2 (``report_user_errors``; ``TIEDEMB_DEBUG=1`` re-raises user errors
too); ``TIEDEMB_LOG_LEVEL=info`` (or ``--log_level=info``, which wins) shows tiedemb's own log messages.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from tiedemb.errors import UserError, check_choice

DEBUG_ENV = "TIEDEMB_DEBUG"
USER_ERROR_EXIT = 2
PREEMPTED_EXIT = 143
"""The exit status of a run stopped by SIGTERM (128 + 15), not Lightning's 0: a sweep then records the
cell as preempted, to be resumed."""

LOG_LEVEL_ENV = "TIEDEMB_LOG_LEVEL"
LEVELS = ("debug", "info", "warning", "error")

T = TypeVar("T")


class _TiedembHandler(logging.StreamHandler):
    """The stderr handler ``set_log_level`` adds, recognised so that it is added once."""


def set_log_level(level: str | None, source: str = "--log_level") -> None:
    """Show ``tiedemb.*`` messages of ``level`` and above on stderr; ``None`` leaves logging alone."""
    if level is None or not str(level).strip():
        return
    name = check_choice(source, str(level).strip().lower(), LEVELS)
    logger = logging.getLogger("tiedemb")
    logger.setLevel(name.upper())
    if not any(isinstance(handler, _TiedembHandler) for handler in logger.handlers):
        handler = _TiedembHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # one line per message: not again through a root handler


def set_log_level_from_env() -> None:
    set_log_level(os.environ.get(LOG_LEVEL_ENV), source=LOG_LEVEL_ENV)


def find_user_error(error: BaseException) -> BaseException | None:
    """The ``UserError`` (or Lightning's ``MisconfigurationException``) behind ``error``, however wrapped."""
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
    """argparse saying a mistake as ``error: ...`` and a hint, exit 2; ``--dry_run`` a hidden alias of ``--dry-run``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._aliases: dict[str, str] = {}

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        # --push_to_hub is spelled --push-to-hub
        spelled = [f"--{name[2:].replace('_', '-')}" if str(name).startswith("--") else name for name in names]
        action = super().add_argument(*spelled, **kwargs)
        for name in action.option_strings:
            if name.startswith("--") and "-" in name[2:]:
                self._aliases[name[:2] + name[2:].replace("-", "_")] = name
        return action

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """Each aliased option spelled as ``--help`` shows it (up to a ``--``: values follow it)."""
        tokens = list(sys.argv[1:] if args is None else args)
        end = tokens.index("--") if "--" in tokens else len(tokens)
        for index, token in enumerate(tokens[:end]):
            name, equals, value = token.partition("=")
            tokens[index] = self._aliases.get(name, name) + equals + value if token.startswith("--") else token
        return super().parse_known_args(tokens, namespace)

    def error(self, message: str) -> NoReturn:
        if os.environ.get(DEBUG_ENV):
            super().error(message)
        message = message[len("argument ") :] if message.startswith("argument ") else message
        sys.stderr.write(f"error: {message}\nhint: run `{self.prog} --help` for the options\n")
        self.exit(USER_ERROR_EXIT)
