"""``tiedemb audit``: does a transformers architecture start as a tied 2-gram model, far above ln n?

It builds the architecture with transformers' own config class and random initialisation (a
local config.json or folder, or a model_type, with ``--set KEY=VALUE`` overrides; nothing is
downloaded), measures its initial loss on one batch, and prints it beside the theory's prediction
(docs/science.md §1, extended to the architecture's input and output scales, final norm and
soft-cap), ln n, the residual branches' size beside the embedding, and the verdict. ``--remedy``
applies each of the project's remedies that fits. docs/audit.md has the details.
"""

from __future__ import annotations

from pathlib import Path

from tiedemb.options import PositiveInt, number_type
from tiedemb.training.exits import CommandParser, report_user_errors


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path, help="a local config.json, or a folder holding one")
    parser.add_argument("--model-type", help="a transformers model_type (llama, gemma, gpt2, bert, t5 ...)")
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides (hidden_size=512 num_hidden_layers=2)",
    )
    parser.add_argument("--remedy", action="store_true", help="also apply each of the project's remedies that fits")
    parser.add_argument("--batch", type=number_type(PositiveInt), default=4, help="rows of token ids (default 4)")
    parser.add_argument("--seq-len", type=number_type(PositiveInt), default=64, help="ids a row (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="the random initialisation's and the ids' seed")
    parser.add_argument("--text", type=Path, help="a local text file to take the ids from (with --tokenizer)")
    parser.add_argument("--tokenizer", help="a local tokenizer folder for --text")
    parser.add_argument(
        "--max-params", type=number_type(PositiveInt), default=2_000_000_000, help="refuse larger models (default 2e9)"
    )
    return parser


def run(args) -> list[str]:
    # Deferred: torch and transformers load only when the command runs, not for ``tiedemb --help``.
    from tiedemb.errors import UserError
    from tiedemb.weights.audit.build import parse_overrides
    from tiedemb.weights.audit.report import lines
    from tiedemb.weights.audit.run import audit

    if args.source is None and args.model_type is None:
        raise UserError("a config.json (or the folder holding it) or --model-type is required")
    if (args.text is None) != (args.tokenizer is None):
        raise UserError("--text and --tokenizer go together: the ids come from the text through the tokenizer")

    result = audit(
        model_type=args.model_type,
        source=args.source,
        overrides=parse_overrides(args.set),
        batch_size=args.batch,
        seq_len=args.seq_len,
        seed=args.seed,
        text=args.text,
        tokenizer=args.tokenizer,
        remedies=args.remedy,
        max_parameters=args.max_params,
    )
    return lines(result)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    output = report_user_errors(lambda: run(args))
    if isinstance(output, int):  # the exit status of a user error, already reported
        return output
    print("\n".join(output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
