"""``python -m tiedemb.sweep SWEEP.yaml --out DIR``: run a sweep file's cells one after another.

The file format: ``tiedemb/experiments/sweep_file.py``."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tiedemb.errors import UserError
from tiedemb.experiments.stopping import SweepStopped
from tiedemb.options import NonNegativeInt
from tiedemb.training.exits import PREEMPTED_EXIT, CommandParser, report_user_errors
from tiedemb.training.shipped_configs import resolve_config


def sweep_file(text: str) -> Path:
    """The sweep file named, or the shipped one of that name where there is no such file here."""
    return Path(resolve_config(text))


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sweep_file",
        type=sweep_file,
        help="the sweep file: its studies, grids and overrides (configs/sweeps/*.yaml; a shipped one where "
        "there is no such file here)",
    )
    parser.add_argument(
        "--out", type=Path, help="folder for the cells (created if absent; default: runs/<the sweep's name>)"
    )
    parser.add_argument(
        "--cell", type=NonNegativeInt, help="run only the cell with this index (e.g. a job array's task)"
    )
    parser.add_argument("--list", action="store_true", help="list the cells and their state")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the commands only")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return report_user_errors(lambda: _main(args))
    except SweepStopped as stopped:
        print(
            f"stopped by {stopped}; the cell that ran is recorded as preempted (see its status.json)", file=sys.stderr
        )
        return PREEMPTED_EXIT
    except KeyboardInterrupt:
        print("interrupted; run the same command again to continue", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    from tiedemb.experiments.cells import cell_args, cell_dir, cell_state, run_sweep, validate_cell
    from tiedemb.experiments.sweep_file import load_sweep

    workdir = Path.cwd()
    sweep = load_sweep(args.sweep_file, workdir)
    if args.out is None:
        args.out = Path("runs") / sweep.name
    out: Path = args.out.resolve()
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(args.out)!r} is a file; pass a folder for the cells (created if absent)")
    cells = sweep.cells
    if args.cell is not None:
        chosen = [cell for cell in sweep.all_cells if cell.index == args.cell]
        if not chosen:
            raise UserError(f"--cell {args.cell}: the sweep has cells 0..{len(sweep.all_cells) - 1}")
        cell = chosen[0]
        skipped = sweep.study(cell.study).skipped_because
        if skipped:  # said so, nothing to do
            print(f"cell {cell.id} is skipped: {skipped}")
            return 0
        cells = [cell]
    if args.list:
        for cell in cells:
            state, note = cell_state(sweep, cell, out)
            print(f"{cell.index:>4}  {state:<12} {cell.id}{f'  {note}' if note else ''}")
        return 0
    if args.dry_run:
        for cell in cells:
            validate_cell(sweep, cell, cell_dir(out, cell))
        for cell in cells:
            print(f"{cell.id}: tiedemb {shlex.join(cell_args(sweep, cell, cell_dir(out, cell), cell.command))}")
        print(f"{len(cells)} cells are valid")
        return 0
    return _summary(sweep.name, out, run_sweep(sweep, out, cells, workdir))


def _summary(name: str, out: Path, outcome: dict[str, list[str]]) -> int:
    from tiedemb.experiments import layout

    print(
        f"sweep {name!r}: {len(outcome['finished'])} finished, {len(outcome['failed'])} failed, "
        f"{len(outcome['waiting'])} waiting, {len(outcome['skipped'])} already done; "
        f"report with: python -m tiedemb.report {out}"
    )
    for cell_id in outcome["failed"]:
        print(f"  failed: {cell_id} (see {out / cell_id / layout.LOG_FILE})")
    if outcome["waiting"]:
        # Not a failure of this run: the same command runs them once their upstream cells finish.
        print(f"  {len(outcome['waiting'])} waiting for upstream cells; run the same command again once those finish")
    return 1 if outcome["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
