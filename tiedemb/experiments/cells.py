"""Running a sweep: validate every cell, then run them one after another, each in its own folder.

Each cell is an ordinary ``tiedemb fit`` subprocess (then ``tiedemb test`` when the study asks), so a
crash or an out-of-memory kill ends that cell only. A rerun of the sweep skips finished cells and
resumes the others from their last checkpoint; a chained cell waits until its upstream cell has finished.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.experiments import layout
from tiedemb.experiments.stopping import STOP_SIGNALS_RECEIVED as STOP
from tiedemb.experiments.stopping import SweepStopped
from tiedemb.experiments.sweep_file import CHAIN_KEY, Cell, Sweep
from tiedemb.training.exits import PREEMPTED_EXIT
from tiedemb.training.status_file import now, process_fields

#: The installed package's command line: sweeps run from any install, not only from a checkout with main.py.
TIEDEMB_COMMAND = [sys.executable, "-m", "tiedemb"]
CSV_LOGGER = "lightning.pytorch.loggers.CSVLogger"
WANDB_LOGGER = "lightning.pytorch.loggers.WandbLogger"
FAILURE_TAIL_LINES = 20


def cell_dir(out: Path, cell: Cell) -> Path:
    return out / cell.id


def render(value: Any) -> str:
    """A value as jsonargparse reads it on the command line."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def loggers(sweep: Sweep, cell: Cell, folder: Path, stage: str) -> list[dict[str, Any]]:
    """The cell's loggers: W&B grouped by experiment and tagged by label, and CSV metrics."""
    settings: list[dict[str, Any]] = []
    if sweep.wandb is not None:
        tags = [f"experiment={sweep.name}", f"study={cell.study}", *(f"{k}={v}" for k, v in cell.labels.items())]
        init = {
            "project": sweep.wandb["project"],
            "save_dir": str(folder),
            "name": cell.id if stage == "fit" else f"{cell.id} ({stage})",
            "group": sweep.name,
            "job_type": cell.study if stage == "fit" else f"{cell.study}-{stage}",
            "tags": tags,
            # labels as config too: the dashboard can group and filter by them like any setting
            "config": {"sweep": {"experiment": sweep.name, "study": cell.study, "stage": stage, **cell.labels}},
        }
        settings.append({"class_path": WANDB_LOGGER, "init_args": init})
    settings.append({"class_path": CSV_LOGGER, "init_args": {"save_dir": str(folder), "name": "csv"}})
    return settings


def cell_args(
    sweep: Sweep,
    cell: Cell,
    folder: Path,
    stage: str = "fit",
    ckpt_path: str | None = None,
    upstream_checkpoint: str | None = None,
) -> list[str]:
    """The command-line arguments of one stage of a cell; a chained cell's ``upstream_checkpoint`` is a
    placeholder where only the command line is checked (the parser takes the path as a string)."""
    args = [stage]
    for config in cell.configs:
        args += ["--config", str(config)]
    # Output goes to a log file: no progress bar, unless the sweep file asks for one.
    args.append("--trainer.enable_progress_bar=false")
    args += [f"--{key}={render(value)}" for key, value in cell.overrides.items()]
    if cell.upstream is not None:  # after the overrides: the chain decides where the weights come from
        placeholder = f"<the last checkpoint of {cell.upstream.id}>"
        args.append(f"--{CHAIN_KEY}={upstream_checkpoint or placeholder}")
    # The sweep owns where a cell writes: set last, so no config can send two cells to one folder.
    # The cell's folder is the run's folder (--run_name=.), so a rerun continues in it.
    args += [
        f"--trainer.default_root_dir={folder}",
        "--run_name=.",
        f"--trainer.logger={json.dumps(loggers(sweep, cell, folder, stage))}",
    ]
    if ckpt_path is not None:
        args.append(f"--ckpt_path={ckpt_path}")
    return args


# --------------------------------------------------------------------------- validation


def validate_cell(sweep: Sweep, cell: Cell, folder: Path) -> dict[str, Any]:
    """The cell's configuration as the CLI's parser resolves it (jsonargparse; nothing instantiated), or
    a ``UserError`` naming the cell and the key. What only the run can check (e.g. widths that divide)
    is refused by the run's own first step."""
    from tiedemb.training.arguments import choice_mismatch, condense_parse_error, nearest_valid_key

    parser, subcommands = cli_parsers()
    args = cell_args(sweep, cell, folder, cell.command)
    try:
        config = parser.parse_args(args)
    except argparse.ArgumentError as error:
        nearest = nearest_valid_key(str(error), subcommands.get(args[0], parser))
        message = choice_mismatch(condense_parse_error(str(error))) + (f"; did you mean {nearest}?" if nearest else "")
        raise UserError(f"sweep {sweep.name!r}, cell {cell.id!r}: the command line is rejected: {message}") from None
    return config[config["subcommand"]].as_dict()


class _Parsers(Exception):
    """Raised from LightningCLI's ``parse_arguments`` hook with the parsers it built: nothing is parsed or built."""


@functools.cache
def cli_parsers() -> tuple[Any, dict[str, Any]]:
    """The CLI's parser and each subcommand's, as LightningCLI builds them, built once for every cell."""
    from tiedemb.cli import TiedembCLI, cli_kwargs

    class Parsers(TiedembCLI):
        def parse_arguments(self, parser: Any, args: Any) -> None:
            raise _Parsers(parser, self.subcommand_parsers())

    try:
        with warnings.catch_warnings():
            # The parsers are built for command lines given as lists; the sweep's own arguments are not theirs.
            warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python")
            # exit_on_error: a mistake is raised to the sweep, which names the cell, not printed
            Parsers(**cli_kwargs(), save_config_callback=None, parser_kwargs={"exit_on_error": False}, args=[])
    except _Parsers as built:
        return built.args
    raise AssertionError("the CLI's parse_arguments hook was not called")


# --------------------------------------------------------------------------- chained cells


def waiting_reason(sweep: Sweep, cell: Cell, out: Path) -> str | None:
    """Why a chained cell cannot start yet (its upstream ``failed``, ``not run`` ...); ``None``: it can."""
    if cell.upstream is None:
        return None
    skipped = sweep.study(cell.upstream.study).skipped_because
    if skipped:
        return f"study {cell.upstream.study!r} is skipped: {skipped}"
    folder = cell_dir(out, cell.upstream)
    status = layout.read_status(folder)
    if status is None:
        return "not run"
    if status.get("state") != layout.FINISHED:
        return str(status.get("state") or layout.RUNNING)
    if (layout.read_json(folder / layout.CELL_FILE) or {}).get("spec_hash") != cell.upstream.spec_hash:
        return "finished with other settings"  # its checkpoint is not the one this cell's spec names
    return None


def record_waiting(sweep: Sweep, cell: Cell, out: Path, workdir: Path, message: str) -> None:
    folder = cell_dir(out, cell)
    discard_superseded(cell, folder)
    folder.mkdir(parents=True, exist_ok=True)
    if layout.read_json(folder / layout.CELL_FILE) is None:  # the report lists the cell as waiting
        layout.write_json(folder / layout.CELL_FILE, _cell_record(sweep, cell, workdir))
    previous = layout.read_status(folder) or {}
    layout.write_json(
        folder / layout.STATUS_FILE, {**previous, "state": layout.WAITING, "message": message, "since": now()}
    )


def cell_state(sweep: Sweep, cell: Cell, out: Path) -> tuple[str, str]:
    """The cell's state for ``--list``, and what a waiting chained cell waits for."""
    state = (layout.read_status(cell_dir(out, cell)) or {}).get("state", "not started")
    if cell.upstream is None or state in (layout.FINISHED, layout.RUNNING):
        return state, ""
    reason = waiting_reason(sweep, cell, out)
    if reason is None:
        return ("ready" if state == layout.WAITING else state), ""  # its upstream has finished since
    return layout.WAITING, f"waits for {cell.upstream.id} ({reason})"


# --------------------------------------------------------------------------- running


def pending_cells(cells: list[Cell], out: Path) -> list[Cell]:
    changed, pending = [], []
    for cell in cells:
        folder = cell_dir(out, cell)
        recorded = layout.read_json(folder / layout.CELL_FILE)
        if layout.is_finished(folder):
            if recorded and recorded.get("spec_hash") != cell.spec_hash:
                changed.append(cell.id)
            continue
        pending.append(cell)
    if changed:
        raise UserError(
            f"{out} holds finished cells run with other settings than the sweep file now gives "
            f"({', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''}); use another --out folder, or delete "
            "those cell folders to run them again"
        )
    return pending


def write_manifest(sweep: Sweep, out: Path) -> None:
    layout.write_json(
        out / layout.MANIFEST_FILE,
        {
            "name": sweep.name,
            "description": sweep.description,
            "sweep_file": str(sweep.path.resolve()),
            "cells": [{"id": cell.id, "study": cell.study} for cell in sweep.cells],
            "skipped_studies": {study.name: study.skipped_because for study in sweep.studies if study.skipped_because},
            "wandb": sweep.wandb,
            # the claims and the report's sections as the file stated them (read back by the report)
            **({"analysis": asdict(sweep.analysis)} if sweep.analysis else {}),
            **({"report": sweep.report} if sweep.report else {}),
        },
    )


def git(args: list[str], folder: Path, timeout: float = 30) -> str | None:
    """``git ARGS``'s output in ``folder``; ``None`` outside a git checkout or without git."""
    try:
        found = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found.stdout if found.returncode == 0 else None


def source_commit() -> str | None:
    """The git commit of the tiedemb source the cells run (``+``: with uncommitted changes), if any."""
    source = Path(__file__).resolve().parents[2]
    commit = git(["rev-parse", "HEAD"], source)
    if commit is None:
        return None
    dirty = git(["status", "--porcelain", "--untracked-files=no", "--", "tiedemb"], source)
    return commit.strip() + ("+" if (dirty or "").strip() else "")


def discard_superseded(cell: Cell, folder: Path) -> None:
    """Delete what an unfinished earlier attempt with other settings left: its checkpoints could not be
    resumed and its metrics would be mixed into this run's."""
    recorded = layout.read_json(folder / layout.CELL_FILE)
    if recorded and recorded.get("spec_hash") != cell.spec_hash and not layout.is_finished(folder):
        shutil.rmtree(folder)


def _cell_record(sweep: Sweep, cell: Cell, workdir: Path, checkpoint: str | None = None) -> dict[str, Any]:
    record = {
        **cell.spec(),
        "id": cell.id,
        "spec_hash": cell.spec_hash,
        "workdir": str(workdir),
        "commit": source_commit(),
    }
    if cell.upstream is not None and checkpoint is not None:
        record["pretrained_from"] = {**cell.upstream_spec(), "path": checkpoint}
    return record


def run_cell(sweep: Sweep, cell: Cell, out: Path, workdir: Path) -> bool:
    """Run one cell's stages (each command line is in its log.txt); return whether it finished."""
    from tiedemb.training.checkpoints import last_checkpoints

    folder = cell_dir(out, cell)
    discard_superseded(cell, folder)
    folder.mkdir(parents=True, exist_ok=True)
    previous = layout.read_status(folder) or {}
    status: dict[str, Any] = {
        "state": layout.RUNNING,
        "attempt": int(previous.get("attempt", 0)) + 1,
        "started": now(),
        # kept across resumed attempts: a protocol committed before the study can be checked against it
        "first_started": previous.get("first_started") or previous.get("started") or now(),
        **process_fields(),
        # a stage an earlier attempt completed (fit, before a failed test) is not run again
        "stages": {stage: info for stage, info in (previous.get("stages") or {}).items() if info["returncode"] == 0},
    }
    begin = time.monotonic()
    checkpoint = None
    if cell.upstream is not None:
        try:
            checkpoint = str(_checkpoint(cell_dir(out, cell.upstream), "last"))
        except UserError as error:  # finished without a checkpoint: never start on random weights
            _record(folder, status, layout.FAILED, begin, message=f"error: {error}")
            return False
    layout.write_json(folder / layout.CELL_FILE, _cell_record(sweep, cell, workdir, checkpoint))
    stages = [stage for stage in [cell.command, *(["test"] if cell.test else [])] if stage not in status["stages"]]
    status["resumed"] = cell.command in stages and cell.command == "fit" and bool(last_checkpoints([folder]))
    for stage in stages:
        status["stage"] = stage
        if STOP.received:  # told to stop before this stage started: it is not started
            _record_stop(folder, status, stage, begin)
        layout.write_json(folder / layout.STATUS_FILE, status)
        resume = "last" if status["resumed"] else None
        ckpt_path = str(_checkpoint(folder, cell.test)) if stage == "test" else resume
        command = [*TIEDEMB_COMMAND, *cell_args(sweep, cell, folder, stage, ckpt_path, checkpoint)]
        started = time.monotonic()
        try:
            code = _run_logged(
                command, folder / layout.LOG_FILE, workdir, f"attempt {status['attempt']}, {stage}", sweep.threads
            )
        except KeyboardInterrupt:
            message = f"interrupted (Ctrl-C) in {stage}: run the sweep again to resume from its last checkpoint"
            _record(folder, status, layout.FAILED, begin, message=message)
            raise
        status["stages"][stage] = {"returncode": code, "seconds": round(time.monotonic() - started, 1)}
        if STOP.received and (code != 0 or stage != stages[-1]):
            # the sweep was told to stop and passed SIGTERM on (a cell whose last stage completed is finished)
            _record_stop(folder, status, stage, begin)
        if code != 0:
            preempted = code in (PREEMPTED_EXIT, -signal.SIGTERM)
            message = _preempted(stage) if preempted else _tail(folder / layout.LOG_FILE)
            _record(folder, status, layout.FAILED, begin, message=message)
            return False
    status.pop("stage", None)
    _record(folder, status, layout.FINISHED, begin)
    return True


def _record(folder: Path, status: dict[str, Any], state: str, begin: float, **fields: Any) -> None:
    status.update(state=state, finished=now(), seconds=round(time.monotonic() - begin, 1), **fields)
    layout.write_json(folder / layout.STATUS_FILE, status)


def _preempted(stage: str) -> str:
    return f"preempted (SIGTERM) in {stage}: run the sweep again to resume from its last checkpoint"


def _record_stop(folder: Path, status: dict[str, Any], stage: str, begin: float) -> None:
    """Record a cell whose sweep got SIGTERM as preempted (a stage that completed counts as done), and stop."""
    _record(folder, status, layout.FAILED, begin, message=_preempted(stage))
    raise SweepStopped(STOP.received[0])


def _run_logged(command: list[str], log_file: Path, workdir: Path, heading: str, threads: int | None = None) -> int:
    # A fixed thread count fixes the order of every CPU reduction, so a rerun repeats exactly.
    env = None if threads is None else {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(log_file, "a", encoding="utf-8") as log:
        log.write(f"\n===== {now()} {heading}: {shlex.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            with STOP.running(process):
                return process.wait()
        except KeyboardInterrupt:
            # The child got the same Ctrl-C; give it a moment to end, then stop it.
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            raise


def _tail(log_file: Path) -> str:
    lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    return errors[-1] if errors else "\n".join(lines[-FAILURE_TAIL_LINES:])


def _checkpoint(folder: Path, which: str) -> Path:
    """The cell's ``best.ckpt`` (the monitored best, else the newest state) or ``last.ckpt``, for test or a chain."""
    from tiedemb.training.run_dir import run_checkpoint

    return run_checkpoint(folder, None if which == "best" else "last")


def run_sweep(
    sweep: Sweep, out: Path, cells: list[Cell] | None = None, workdir: Path | None = None, echo=print
) -> dict[str, list[str]]:
    """Validate, then run the given cells (all by default), upstream cells first; return cell ids by outcome."""
    out = out.resolve()
    workdir = (workdir or Path.cwd()).resolve()
    selected = sweep.cells if cells is None else cells
    for study in sweep.studies:
        if study.skipped_because:
            echo(f"study {study.name!r} is skipped: {study.skipped_because}")
    todo = pending_cells(selected, out)
    outcome: dict[str, list[str]] = {
        "skipped": [c.id for c in selected if c not in todo],
        "finished": [],
        "failed": [],
        "waiting": [],
    }
    if outcome["skipped"]:
        echo(f"{len(outcome['skipped'])} of {len(selected)} cells already finished")
    if todo:
        echo(f"validating {len(todo)} cells ...")
    for cell in todo:  # every cell before the first one runs: a typo in the last must not wait hours
        validate_cell(sweep, cell, cell_dir(out, cell))
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(sweep, out)
    with STOP.watching():  # SIGTERM stops the running cell, records it and ends the sweep
        for number, cell in enumerate(sweep.run_order(todo), start=1):
            if STOP.received:  # a signal between two cells: nothing is running, nothing to record
                raise SweepStopped(STOP.received[0])
            # Asked only now: an upstream cell run a moment ago in this loop counts.
            reason = waiting_reason(sweep, cell, out)
            if reason is not None and cell.upstream is not None:
                message = f"{cell.id} waits for {cell.upstream.id} ({reason})"
                record_waiting(sweep, cell, out, workdir, message)
                outcome["waiting"].append(cell.id)
                echo(f"[{number}/{len(todo)}] {message}")
                continue
            echo(f"[{number}/{len(todo)}] {cell.id} ...")
            started = time.monotonic()
            ok = run_cell(sweep, cell, out, workdir)
            outcome["finished" if ok else "failed"].append(cell.id)
            detail = "" if ok else f": {(layout.read_status(cell_dir(out, cell)) or {}).get('message', '')[-500:]}"
            seconds = time.monotonic() - started
            echo(f"[{number}/{len(todo)}] {cell.id} {'finished' if ok else 'FAILED'} in {seconds:.0f} s{detail}")
    return outcome
