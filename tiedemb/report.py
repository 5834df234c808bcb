"""``python -m tiedemb.report DIR``: tables, figures and report.md from a folder of runs.

The logic lives in ``tiedemb.experiments.report_writer``; the files it writes are listed there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiedemb.options import PositiveFloat, number_type
from tiedemb.training.exits import CommandParser, report_user_errors


def step_list(text: str) -> list[int]:
    """``--steps 1000,5000``: training steps, each a positive integer."""
    try:
        steps = [int(step) for step in text.split(",") if step.strip()]
    except ValueError:
        steps = []
    if not steps or any(step < 1 for step in steps):
        raise argparse.ArgumentTypeError(f"expected integers >= 1 separated by commas, got {text!r}")
    return steps


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a sweep's --out folder, or any folder of runs")
    parser.add_argument(
        "--target-loss",
        type=number_type(PositiveFloat),
        help="loss for 'steps to target' (default: the highest final loss)",
    )
    parser.add_argument(
        "--steps",
        type=step_list,
        help="steps for the fixed-step loss columns, e.g. 1000,5000 (default: three evaluation steps all runs share)",
    )
    parser.add_argument("--no-wandb", action="store_true", help="do not log the report to W&B")
    parser.add_argument("--no-analysis", action="store_true", help="skip the checkpoint analyses (effective rank ...)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from tiedemb.experiments.report_writer import build_report

    path = report_user_errors(
        lambda: build_report(
            args.folder,
            target_loss=args.target_loss,
            at_steps=args.steps,
            wandb=not args.no_wandb,
            analyses=not args.no_analysis,
        )
    )
    if isinstance(path, int):  # the exit status of a user error, already reported
        return path
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
