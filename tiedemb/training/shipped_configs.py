"""The configs tiedemb ships, and a config path that names one resolved to it.

The repository's ``configs/`` folder is package data of the wheel, installed as ``tiedemb/configs/``
(pyproject.toml maps it there). In a checkout, an editable install included, it stays where it is,
beside the package. So ``--config configs/tied_orth.yaml`` (or ``tied_orth.yaml``, or
``scale/tiny.yaml``) works from any folder: a path that exists locally is used as given, one that
does not but names a shipped config is read from the shipped copy. Configs named inside a config
(``config: base/study.yaml``) and in a sweep file are relative to that file, so once the outer file
is the shipped copy they are shipped copies too.
"""

from __future__ import annotations

import logging
from pathlib import Path, PurePath

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parents[1]
"""The installed ``tiedemb`` package folder."""

CONFIG_OPTIONS = ("--config", "-c")
"""The options that name a config file on the LightningCLI commands."""


def shipped_configs() -> Path | None:
    """The folder of shipped configs: ``tiedemb/configs`` in a wheel, the repository's ``configs/``
    in a checkout; None when neither is there.

    Found by path rather than with ``importlib.resources``: an editable install maps the
    ``tiedemb.configs`` resource to the checkout it was installed from, which is not the package
    imported when another checkout comes first on ``sys.path``; the folder beside the package
    imported is always the one that belongs to it. The repository's folder counts only beside its
    ``pyproject.toml``, so a ``configs/`` folder of something else in site-packages never does.
    """
    installed = PACKAGE / "configs"
    if installed.is_dir():
        return installed
    checkout = PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "configs").is_dir():
        return checkout / "configs"
    return None


def shipped_path(path: str | PurePath) -> Path | None:
    """The shipped config ``path`` names (``configs/tied.yaml``, ``tied.yaml``, ``scale/tiny.yaml``),
    or None when it names none."""
    folder = shipped_configs()
    parts = [part for part in PurePath(path).parts if part != "."]
    if folder is None or not parts or PurePath(path).is_absolute() or ".." in parts:
        return None
    if parts[0] == "configs" and len(parts) > 1:
        parts = parts[1:]
    candidate = folder.joinpath(*parts)
    return candidate if candidate.is_file() else None


def resolve_config(path: str | PurePath, relative_to: Path | None = None) -> str:
    """``path`` itself when it exists here (a local file wins; ``relative_to`` is the folder a
    relative path is read from, the working folder by default) or names no shipped config; else
    the shipped copy, said at info level."""
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
