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
    """The folder of shipped configs, or None.

    Found by path rather than with ``importlib.resources``: an editable install maps that resource to
    the checkout it was installed from, not to the package imported when another checkout comes first
    on ``sys.path``. The repository's folder counts only beside its ``pyproject.toml``.
    """
    installed = PACKAGE / "configs"
    if installed.is_dir():
        return installed
    checkout = PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "configs").is_dir():
        return checkout / "configs"
    return None


def shipped_path(path: str | PurePath) -> Path | None:
    """The shipped config ``path`` names, or None."""
    folder = shipped_configs()
    parts = [part for part in PurePath(path).parts if part != "."]
    if folder is None or not parts or PurePath(path).is_absolute() or ".." in parts:
        return None
    if parts[0] == "configs" and len(parts) > 1:
        parts = parts[1:]
    candidate = folder.joinpath(*parts)
    return candidate if candidate.is_file() else None


def resolve_config(path: str | PurePath, relative_to: Path | None = None) -> str:
    """``path`` itself when it exists (relative to ``relative_to``, default the working folder) or names
    no shipped config; else the shipped copy, said at info level."""
    text = str(path)
    if ((relative_to or Path()) / Path(text).expanduser()).exists():
        return text
    shipped = shipped_path(text)
    if shipped is None:
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
