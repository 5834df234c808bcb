"""``python -m tiedemb.report DIR``: tables, figures and report.md from a folder of runs.

The logic lives in ``tiedemb.experiments.report``; the files it writes are listed there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiedemb.training.exits import report_user_errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiedemb report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a sweep's --out folder, or any folder of runs")
    parser.add_argument("--target-loss", type=float, help="loss for 'steps to target' (default: the highest final loss)")
    parser.add_argument("--steps", help="steps for the fixed-step loss columns, e.g. 1000,5000 (default: three "
                                        "evaluation steps all runs share)")
    parser.add_argument("--no-wandb", action="store_true", help="do not log the report to W&B")
    parser.add_argument("--no-analysis", action="store_true", help="skip the checkpoint analyses (effective rank ...)")
    args = parser.parse_args(argv)
    try:
        steps = [int(step) for step in args.steps.split(",") if step.strip()] if args.steps else None
    except ValueError:
        parser.error(f"--steps: expected integers separated by commas, got {args.steps!r}")
    from tiedemb.experiments.report import build_report

    path = report_user_errors(lambda: build_report(args.folder, target_loss=args.target_loss, at_steps=steps,
                                                   wandb=not args.no_wandb, analyses=not args.no_analysis))
    if isinstance(path, int):  # the exit status of a user error, already reported
        return path
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
