"""``python -m tiedemb.narrowing SOURCE``: how much of each embedding table narrowing keeps, per d_e.

SOURCE is what ``model.pretrained`` takes (a tiedemb checkpoint, a transformers BERT folder or a
hub name). For each width the table gives the share of the token, position and segment tables'
energy (squared Frobenius norm) inside the shared basis fine-tuning would use, for both weightings
(``tiedemb.weights.narrow``): ``balanced``, the default, and ``energy``, the plain SVD.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from tiedemb.options import PositiveInt, number_type
from tiedemb.training.exits import CommandParser, report_user_errors
from tiedemb.training.files import atomic_write_text

DEFAULT_WIDTHS = [32, 64, 128, 192, 256]


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb narrowing", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="a tiedemb .ckpt, a transformers BERT folder or a hub name")
    parser.add_argument(
        "--widths",
        type=number_type(PositiveInt),
        nargs="+",
        default=DEFAULT_WIDTHS,
        help=f"the d_e values (default: {' '.join(map(str, DEFAULT_WIDTHS))}, those below the source's)",
    )
    parser.add_argument("--out", type=Path, help="also write the table as CSV to this file")
    return parser


def narrowing_rows(source: str, widths: list[int]) -> list[dict[str, object]]:
    from tiedemb.errors import UserError
    from tiedemb.weights.narrow import WEIGHTINGS, narrowing_table
    from tiedemb.weights.source import load_pretrained

    weights = load_pretrained(source)
    width = int(weights.fields["embedding_dim"])
    chosen = sorted({w for w in widths if w < width})
    if not chosen:
        raise UserError(f"no width below the source's d_e ({width}): --widths {' '.join(map(str, widths))}")
    rows = []
    for weighting in WEIGHTINGS:
        for row in narrowing_table(weights, chosen, weighting):
            rows.append({"weighting": weighting, **row})
    return rows


def markdown(rows: list[dict[str, object]]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(f"{value:.1%}" if isinstance(value, float) else str(value) for value in row.values())
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rows = report_user_errors(lambda: narrowing_rows(args.source, args.widths))
    if isinstance(rows, int):  # the exit status of a user error, already reported
        return rows
    print("share of each table's energy kept by narrowing to d_e")
    print(markdown(rows))
    if args.out is not None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(args.out, buffer.getvalue())
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
