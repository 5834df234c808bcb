"""``python -m tiedemb.rate_report``: a study with each variant at its own learning rate.

The rule and the files written: ``tiedemb.experiments.rate_study``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tiedemb.training.exits import CommandParser, report_user_errors


def table_and_rate(text: str) -> tuple[Path, float | None]:
    """``TABLE`` or ``TABLE=RATE`` (a table of one fixed-rate study has no rate column)."""
    path, _, rate = text.rpartition("=") if "=" in text else (text, "", "")
    try:
        value = float(rate) if rate else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TABLE or TABLE=RATE, got {text!r}") from None
    if value is not None and not value > 0:
        raise argparse.ArgumentTypeError(f"the rate in {text!r} must be positive")
    return Path(path), value


def rate_list(text: str) -> tuple[float, ...]:
    """``--grid 0.001,0.003``: positive learning rates separated by commas."""
    try:
        rates = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        rates = ()
    if not rates or any(not rate > 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"expected positive rates separated by commas, got {text!r}")
    return rates


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb rate-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=Path, required=True, help="YAML file with an analysis section of claims")
    parser.add_argument("--protocol", type=Path, required=True, help="the protocol file, for its commits")
    parser.add_argument(
        "--tuning", type=table_and_rate, action="append", default=[], help="a tuning run table (TABLE or TABLE=RATE)"
    )
    parser.add_argument(
        "--verdict", type=table_and_rate, action="append", default=[], help="a verdict run table (TABLE or TABLE=RATE)"
    )
    parser.add_argument(
        "--grid",
        type=rate_list,
        default=(),
        help="the protocol's rates (0.001,0.003,0.01,0.03): picks wait for all",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the report")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from tiedemb.experiments.rate_study import read_runs, write_rate_report

    def build() -> Path:
        tuning = [run for path, rate in args.tuning for run in read_runs(path, "tuning", rate)]
        verdict = [run for path, rate in args.verdict for run in read_runs(path, "verdict", rate)]
        return write_rate_report(tuning, verdict, args.claims, args.protocol, args.out, args.grid)

    path = report_user_errors(build)
    if isinstance(path, int):
        return path
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
