"""The checkpoint a command that uses a trained model reads: a run folder's, or a checkpoint file.

``tiedemb predict RUN`` takes a run folder (``runs/<name>``, from any
folder) or a ``.ckpt`` file. In a run folder the best checkpoint by the run's monitored metric
(``checkpoints/best.ckpt``) is used, else its newest state (``checkpoints/last.ckpt``);
``--checkpoint last`` (or ``best``, or a file name inside ``checkpoints/``) picks another. Anything
that is neither is refused in one line saying what it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from tiedemb.errors import UserError
from tiedemb.training.checkpoint_io import BEST_NAME
from tiedemb.training.run_dir import CHECKPOINTS

LAST_FILE = "last.ckpt"
PREFERRED = (BEST_NAME, LAST_FILE)
"""A run folder's checkpoints in the order a command takes them when none is named."""


def run_checkpoint(target: str | os.PathLike, choice: str | None = None) -> Path:
    """The checkpoint file ``target`` (a run folder or a ``.ckpt`` file) stands for.

    ``choice``: ``best``, ``last`` or a file name in the run's ``checkpoints/``; default: best, else last.
    """
    path = Path(target).expanduser()
    if not path.exists():
        raise UserError(f"{str(target)!r} does not exist; pass a run folder (runs/<name>) or a .ckpt file")
    if path.is_file():
        if choice is not None:
            raise UserError(f"--checkpoint {choice!r} picks a file in a run folder; {str(target)!r} is a file already")
        return path
    folder = path / CHECKPOINTS if (path / CHECKPOINTS).is_dir() else path
    if folder == path and path.name != CHECKPOINTS:
        raise UserError(
            f"{str(target)!r} is not a run folder (it has no {CHECKPOINTS}/ folder); pass a run folder "
            "(runs/<name>) or a .ckpt file"
        )
    if choice is not None:
        name = choice if choice.endswith(".ckpt") else f"{choice}.ckpt"
        if (folder / name).is_file():
            return folder / name
        raise UserError(f"{str(folder)!r} has no {name}; {found_checkpoints(folder)}")
    for name in PREFERRED:
        if (folder / name).is_file():
            return folder / name
    raise UserError(
        f"run folder {str(path)!r} has no checkpoint ({found_checkpoints(folder)}): the run ended before "
        "its first validation saved one"
    )


def found_checkpoints(folder: Path) -> str:
    """The checkpoints ``folder`` holds, in words."""
    names = sorted(path.name for path in folder.glob("*.ckpt") if path.is_file())
    return f"it holds {', '.join(names)}" if names else "it holds none"
