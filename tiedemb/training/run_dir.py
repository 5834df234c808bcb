"""One folder per run: its name, where it lies, and which loggers write into it.

Every ``fit``, ``validate``, ``test`` and ``predict`` writes into one folder under
``trainer.default_root_dir`` (``runs/``)::

    runs/<name>-<id>/
        config.yaml            the resolved configuration (a later attempt in the folder: config-1.yaml ...)
        status.json            running / finished / failed (training/status_callback.py)
        checkpoints/           last.ckpt (the newest state), best.ckpt (the best by the monitored
                               metric) and the descriptive names beside them
        csv/version_N/         Lightning's CSV metrics (each attempt, resumed or evaluating, adds one)
        wandb/                 the W&B run (offline-run-* without a server)

The name is ``--run_name``, else the first ``--config`` file's name (the variant: ``tied_orth``)
and a short random id. A run continued from a checkpoint inside a run folder (``--ckpt_path
last``, or the checkpoint's path) writes into that folder again; a ``--run_name`` whose folder
already holds something is refused, never merged into. ``--run_name=.`` makes
``trainer.default_root_dir`` itself the run's folder: a sweep cell's folder is its run folder.

A logger whose ``save_dir`` is ``.`` (the default loggers'), unset, or ``trainer.default_root_dir``
writes into the run's folder; one given another folder keeps it.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

from tiedemb.errors import UserError

HERE = "."
"""``--run_name=.``: ``trainer.default_root_dir`` is the run's own folder (a sweep cell's)."""
CHECKPOINTS = "checkpoints"
"""The folder of a run's checkpoints, inside its run folder."""
HPC_NAME = re.compile(r"^hpc_ckpt_\d+\.ckpt$")
"""Lightning's SLURM checkpoints, written into ``trainer.default_root_dir``: the run's folder."""
FALLBACK_NAME = "run"
"""The name of a run given no config (a checkpoint evaluated alone, outside any run folder)."""


def check_run_name(name: str) -> None:
    """A ``--run_name`` is one folder name (or ``.``): no path separators, nothing hidden."""
    if name == HERE:
        return
    if not name or name == ".." or "/" in name or os.sep in name or name.startswith("."):
        raise UserError(
            f"--run_name={name!r} is not a folder name; give a name without '/' that does not start with '.' "
            "(the folder goes under trainer.default_root_dir), or '.' for trainer.default_root_dir itself"
        )


def base_name(configs: Iterable[str | os.PathLike]) -> str:
    """The first config file's name without its suffix (``configs/tied_orth.yaml``: ``tied_orth``).

    The first config names the variant; the overlays after it (``scale/tiny.yaml``) do not.
    """
    for config in configs:
        stem = Path(str(config)).stem
        if stem:
            return stem
    return FALLBACK_NAME


def run_dir_of_checkpoint(checkpoint: str | os.PathLike, root: str | os.PathLike) -> Path | None:
    """The run folder under ``root`` whose ``checkpoints/`` holds ``checkpoint``, or None.

    That is ``root/<run>/checkpoints/`` (or ``root/<run>/hpc_ckpt_N.ckpt``) or, for a root that is
    itself a run folder (``--run_name=.``), ``root/checkpoints/``. The folder is given as ``root``
    spells it, so a relative root stays relative (Lightning compares a resumed checkpoint
    callback's folder as a string).
    """
    path = Path(checkpoint).expanduser().resolve()
    if path.parent.name == CHECKPOINTS:
        run = path.parent.parent
    elif HPC_NAME.match(path.name):  # Lightning's SLURM checkpoints lie in default_root_dir: the run folder
        run = path.parent
    else:
        return None
    root_path = Path(root).expanduser()
    resolved_root = root_path.resolve()
    if run == resolved_root:
        return root_path
    if run.parent == resolved_root:
        return root_path / run.name
    return None


def holds_something(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def choose_run_dir(
    root: str | os.PathLike,
    run_name: str | None,
    name: str,
    checkpoint: str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[Path, bool]:
    """The run's folder and whether it continues an existing one.

    ``checkpoint`` is the checkpoint the run starts from (resumed or evaluated), if any: inside a
    run folder under ``root``, that folder is continued. Otherwise a ``run_name`` names a new
    folder (refused when it holds something), and without one ``<name>-<id>`` is drawn afresh;
    under SLURM the id is the job's (``<name>-slurm<job>``), continued by the job once requeued.
    """
    root_path = Path(root).expanduser()
    if run_name is not None:
        check_run_name(run_name)
    if run_name == HERE:
        return root_path, holds_something(root_path)
    continued = run_dir_of_checkpoint(checkpoint, root_path) if checkpoint else None
    if run_name:
        folder = root_path / run_name
        if continued is not None and continued.resolve() == folder.resolve():
            return folder, True
        if holds_something(folder):
            raise UserError(
                f"run folder {str(folder)!r} already exists: choose another --run_name, or continue that run with "
                f"--ckpt_path={folder / CHECKPOINTS / 'last.ckpt'}"
            )
        return folder, False
    if continued is not None:
        return continued, True
    job, requeued = slurm_job(environ if environ is not None else os.environ)
    if job is not None:
        # A SLURM job requeued (auto_requeue, --requeue) runs the same command line again: its id
        # names the folder, so the requeued run finds its own (and Lightning its hpc_ckpt_N.ckpt there).
        folder = root_path / f"{name}-slurm{job}"
        if not folder.exists() or (requeued and holds_something(folder)):
            return folder, folder.exists()
    while True:  # an id drawn twice (1 in 4 billion) draws again, never writes into another run
        folder = root_path / f"{name}-{secrets.token_hex(4)}"
        if not folder.exists():
            return folder, False


def newest_hpc_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest ``hpc_ckpt_N.ckpt`` in a run folder under ``root`` (or in ``root``): ``--ckpt_path=hpc``
    continues that run folder, where Lightning looks for it."""
    root_path = Path(root).expanduser()
    found = [path for pattern in ("hpc_ckpt_*.ckpt", "*/hpc_ckpt_*.ckpt") for path in root_path.glob(pattern)]
    found = [path for path in found if HPC_NAME.match(path.name) and path.is_file()]
    return max(found, key=lambda path: path.stat().st_mtime_ns) if found else None


def slurm_job(environ: Mapping[str, str]) -> tuple[str | None, bool]:
    """The SLURM job (``123``, or ``123_4`` for an array task) this process runs in, and whether it was requeued."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else environ.get("SLURM_JOB_ID")
    restarts = str(environ.get("SLURM_RESTART_COUNT") or "0")
    return (job or None), restarts.isdigit() and int(restarts) > 0


def writes_in_run_dir(save_dir: str | os.PathLike | None, root: str | os.PathLike) -> bool:
    """Whether a logger with this ``save_dir`` writes into the run's folder (see the module's text)."""
    if save_dir in (None, "", HERE):
        return True
    return Path(save_dir).expanduser().resolve() == Path(root).expanduser().resolve()
