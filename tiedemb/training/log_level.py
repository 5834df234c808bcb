"""How much of tiedemb's own logging (the ``tiedemb.*`` loggers) a command shows: ``TIEDEMB_LOG_LEVEL=info``,
or ``--log_level=info`` on the LightningCLI subcommands (the option wins). Unset, logging is left alone.
"""

from __future__ import annotations

import logging
import os
import sys

from tiedemb.errors import check_choice

LOG_LEVEL_ENV = "TIEDEMB_LOG_LEVEL"
LEVELS = ("debug", "info", "warning", "error")


class _TiedembHandler(logging.StreamHandler):
    """The stderr handler this module adds, recognised so that it is added once."""


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
        # One line per message: not again through a handler the root logger may have.
        logger.propagate = False


def set_log_level_from_env() -> None:
    """Apply ``TIEDEMB_LOG_LEVEL`` when it is set."""
    set_log_level(os.environ.get(LOG_LEVEL_ENV), source=LOG_LEVEL_ENV)
