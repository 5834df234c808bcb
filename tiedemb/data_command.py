"""``tiedemb data prepare NAME ...``: fetch the data the studies read and write it under ``data/``.

``python -m tiedemb.data_command prepare NAME ...`` is the same command; the work is in
``tiedemb.data.preparing``, what each name holds in README's Data section.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tiedemb.data.preparing import CHECKSUMS, DATA_DIR, ENTRIES
from tiedemb.training.exits import CommandParser, report_user_errors


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb data", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", metavar="prepare", required=True, parser_class=CommandParser)
    prepare = verbs.add_parser(
        "prepare",
        help="fetch and convert data sets into the data folder",
        description="Fetch each named data set once (the network is needed), convert it to the "
        f"files the shipped configs read and list their sha256 in {DATA_DIR}/{CHECKSUMS}. "
        "A data set already there is left as it is. Without the network, copy a data folder prepared elsewhere "
        f"(sha256sum -c {CHECKSUMS} in it checks the copy).",
    )
    prepare.add_argument("names", nargs="*", metavar="NAME", help=f"one or more of: {', '.join(ENTRIES)}")
    prepare.add_argument(
        "--dir", type=Path, default=DATA_DIR, help=f"the data folder (default: {DATA_DIR}, what the configs read)"
    )
    prepare.add_argument("--force", action="store_true", help="make a data set again even if it is there")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from tiedemb.data.preparing import prepare

    done = report_user_errors(lambda: prepare(args.names, args.dir, args.force))
    return done if isinstance(done, int) else 0


if __name__ == "__main__":
    sys.exit(main())
