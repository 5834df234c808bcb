"""``python -m tiedemb.report DIR``: tables, figures and report.md from a folder of runs.

The files written: ``tiedemb.experiments.report_writer``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tiedemb.training.exits import CommandParser, report_user_errors


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a sweep's --out folder, or any folder of runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from tiedemb.experiments.report_writer import build_report

    path = report_user_errors(lambda: build_report(args.folder))
    if isinstance(path, int):  # the exit status of a user error, already reported
        return path
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
