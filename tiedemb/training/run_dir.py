"""One folder per run under ``trainer.default_root_dir`` (docs/usage.md, "One folder per run"): named
``--run_name`` (``.``: the root itself, a sweep cell's folder), else the first config's name and a short
id; a run continued from a checkpoint in a run folder writes there again.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from tiedemb.errors import UserError

HERE = "."
CHECKPOINTS = "checkpoints"
BEST_NAME = "best.ckpt"
"""The best checkpoint of a run by its checkpoint callback's monitored metric, whatever that metric is."""
LAST_FILE = "last.ckpt"
PREFERRED = (BEST_NAME, LAST_FILE)
"""A run folder's checkpoints in the order a command takes them when none is named."""
TRANSFORMERS_FOLDER = "transformers"
FALLBACK_NAME = "run"


def check_run_name(name: str) -> None:
    """A ``--run_name`` is one folder name (or ``.``): no path separators, nothing hidden."""
    if name == HERE:
        return
    if not name or "/" in name or os.sep in name or name.startswith("."):
        raise UserError(
            f"--run_name={name!r} is not a folder name; give a name without '/' that does not start with '.' "
            "(the folder goes under trainer.default_root_dir), or '.' for trainer.default_root_dir itself"
        )


def base_name(configs: Iterable[str | os.PathLike]) -> str:
    """The first config file's name without its suffix (``configs/tied_orth.yaml``: ``tied_orth``)."""
    return next((Path(str(config)).stem for config in configs if Path(str(config)).stem), FALLBACK_NAME)


def run_dir_of_checkpoint(checkpoint: str | os.PathLike, root: str | os.PathLike) -> Path | None:
    """The run folder under ``root`` whose ``checkpoints/`` holds ``checkpoint``, or None; spelled as
    ``root`` is (Lightning compares a resumed callback's folder as a string)."""
    folder, root_path = Path(checkpoint).expanduser().resolve().parent, Path(root).expanduser()
    run = folder.parent
    if folder.name != CHECKPOINTS or root_path.resolve() not in (run, run.parent):
        return None
    return root_path if run == root_path.resolve() else root_path / run.name


def choose_run_dir(
    root: str | os.PathLike,
    run_name: str | None,
    name: str,
    checkpoint: str | os.PathLike | None = None,
) -> tuple[Path, bool]:
    """The run's folder and whether it continues one: the checkpoint's, else ``run_name``, else ``<name>-<id>``."""
    root_path = Path(root).expanduser()
    if run_name is not None:
        check_run_name(run_name)
    if run_name == HERE:
        return root_path, root_path.is_dir() and any(root_path.iterdir())
    continued = run_dir_of_checkpoint(checkpoint, root_path) if checkpoint else None
    if run_name:
        folder = root_path / run_name
        if continued is not None and continued.resolve() == folder.resolve():
            return folder, True
        if folder.is_dir() and any(folder.iterdir()):
            last = folder / CHECKPOINTS / LAST_FILE
            found = sorted((folder / CHECKPOINTS).glob("*.ckpt"), key=lambda path: path.stat().st_mtime_ns)
            newest = last if last.is_file() else found[-1] if found else None
            advice = f", or continue that run with --ckpt_path={newest}" if newest is not None else ""
            raise UserError(f"run folder {str(folder)!r} already exists: choose another --run_name{advice}")
        return folder, False
    if continued is not None:
        return continued, True
    while True:  # an id drawn twice (1 in 4 billion) draws again, never writes into another run
        folder = root_path / f"{name}-{secrets.token_hex(4)}"
        if not folder.exists():
            return folder, False


PARENT_RUN_DIR = "TIEDEMB_PARENT_RUN_DIR"  # <pid>:<folder>, for the processes a run starts (DDP ranks)


def share_run_dir(folder: Path, environ: dict[str, str] | None = None) -> None:
    """Tell the DDP ranks this process starts (the same command line again) which run folder it chose."""
    (os.environ if environ is None else environ)[PARENT_RUN_DIR] = f"{os.getpid()}:{folder}"


def run_dir_of_parent(environ: Mapping[str, str] | None = None) -> Path | None:
    """The run folder of the process that started this one, when this is a DDP rank > 0 of that run."""
    environ = os.environ if environ is None else environ
    pid, _, folder = str(environ.get(PARENT_RUN_DIR, "")).partition(":")
    if not folder or not pid.isdigit() or int(pid) != os.getppid():
        return None
    if str(environ.get("LOCAL_RANK", "0")) in ("", "0"):
        return None
    return Path(folder)


def writes_in_run_dir(save_dir: str | os.PathLike | None, root: str | os.PathLike) -> bool:
    """Whether a logger with this ``save_dir`` (``.``, unset or the root) writes into the run's folder."""
    if save_dir in (None, "", HERE):
        return True
    return Path(save_dir).expanduser().resolve() == Path(root).expanduser().resolve()


# --------------------------------------------------------------------------- the checkpoint a command reads


def run_checkpoint(target: str | os.PathLike, choice: str | None = None) -> Path:
    """The checkpoint file a run folder (best, else last; or ``choice``) or a ``.ckpt`` file stands for."""
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
    names = [choice if choice.endswith(".ckpt") else f"{choice}.ckpt"] if choice is not None else PREFERRED
    found = next((folder / name for name in names if (folder / name).is_file()), None)
    if found is not None:
        return found
    held = sorted(path.name for path in folder.glob("*.ckpt"))
    held_text = f"it holds {', '.join(held)}" if held else "it holds none"
    if choice is not None:
        raise UserError(f"{str(folder)!r} has no {names[0]}; {held_text}")
    raise UserError(
        f"run folder {str(path)!r} has no checkpoint ({held_text}): the run ended before its first validation saved one"
    )


# --------------------------------------------------------------------------- fit --save_transformers


def export_beside(checkpoint: Path, run_dir: Path, has_tokenizer: bool) -> tuple[Path | None, str]:
    """Export ``checkpoint`` to ``<run_dir>/transformers``; the folder (None if it failed) and what was said."""
    out = run_dir / TRANSFORMERS_FOLDER
    command = [sys.executable, "-m", "tiedemb.export", str(checkpoint), str(out)]
    if not has_tokenizer:
        command.append("--no-tokenizer")
    # The same tiedemb as this process's, installed or not: its package's parent goes first on the path.
    package_root = str(Path(__file__).resolve().parents[2])  # tiedemb/training/run_dir.py
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    said = (result.stdout + result.stderr).strip().splitlines()
    if result.returncode != 0:
        reason = next((line for line in said if line.startswith("error:")), said[-1] if said else "")
        return None, f"the transformers folder was not written: {reason.removeprefix('error: ')}"
    return out, said[-1] if said else f"wrote {out}"
