"""A ``--config`` path that is not here but names a shipped config (``configs/tied_orth.yaml``,
``tied_orth.yaml``, ``scale/tiny.yaml``) resolved to the shipped copy: ``tiedemb/configs/`` in a wheel
(pyproject.toml maps it there), the repository's ``configs/`` in a checkout. A local file wins.
"""

from __future__ import annotations

import logging
from pathlib import Path, PurePath

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG_OPTIONS = ("--config", "-c")


def shipped_configs() -> Path | None:
    """The folder of shipped configs, or None; by path, not ``importlib.resources`` (an editable install
    maps that to the checkout it was installed from, not to the one first on ``sys.path``)."""
    if (PACKAGE / "configs").is_dir():
        return PACKAGE / "configs"
    if (PACKAGE.parent / "pyproject.toml").is_file() and (PACKAGE.parent / "configs").is_dir():
        return PACKAGE.parent / "configs"
    return None


def resolve_config(path: str | PurePath, relative_to: Path | None = None) -> str:
    """``path`` itself when it exists (relative to ``relative_to``) or names no shipped config; else the copy."""
    text, folder = str(path), shipped_configs()
    parts = [part for part in PurePath(text).parts if part != "."]
    if ((relative_to or Path()) / Path(text).expanduser()).exists() or folder is None or not parts:
        return text
    if PurePath(text).is_absolute() or ".." in parts:
        return text
    shipped = folder.joinpath(*(parts[1:] if parts[0] == "configs" and len(parts) > 1 else parts))
    if not shipped.is_file():
        return text
    log.info("%s is not here: using the shipped %s", text, shipped)
    return str(shipped)


def resolve_config_args(argv: list[str]) -> list[str]:
    """A LightningCLI command line with each ``--config``/``-c`` value resolved by ``resolve_config``."""
    resolved = list(argv)
    for index, token in enumerate(resolved):
        if token == "--":
            break
        name, equals, value = token.partition("=")
        if name in CONFIG_OPTIONS and equals:
            resolved[index] = f"{name}={resolve_config(value)}"
        elif token in CONFIG_OPTIONS and index + 1 < len(resolved):
            resolved[index + 1] = resolve_config(resolved[index + 1])
    return resolved
