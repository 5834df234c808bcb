"""``python -m tiedemb.data.keep_tokenizer RUN OUT``: the tokenizer a pretraining run read, saved as a folder.

A trained tokenizer lives in the run's cache, keyed by its text, and training it again numbers its
tokens differently; kept as a folder, other runs name it with ``--data.tokenizer=OUT`` whatever
split of the text they draw (the width study keeps its pilot's). RUN is a checkpoint or a run's
folder (its newest ``last*.ckpt``); OUT must be absent or empty.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tiedemb.errors import UserError
from tiedemb.options import add_weights_only
from tiedemb.training.exits import CommandParser, report_user_errors


def keep_tokenizer(source: str | Path, out: str | Path, weights_only: bool = True) -> Path:
    """Save the tokenizer of the run at ``source`` into ``out``; returns ``out``."""
    from tiedemb.data.text import run_tokenizer
    from tiedemb.data.tokenizers import recorded_fingerprint, tokenizer_fingerprint
    from tiedemb.training.checkpoints import last_checkpoints, read_checkpoint
    from tiedemb.training.files import atomic_directory

    source, out = Path(source), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{str(out)!r} already exists and is not an empty folder; a kept tokenizer is not overwritten")
    path = source if source.is_file() else next(iter(last_checkpoints([source])), None)
    if path is None:
        raise UserError(f"{str(source)!r} is neither a checkpoint file nor a run's folder with a last*.ckpt")
    checkpoint = read_checkpoint(path, weights_only=weights_only)
    tokenizer = run_tokenizer(checkpoint, path)
    if tokenizer is None:
        raise UserError(f"the run of {str(path)!r} trained on the embedded corpus, which has no tokenizer to keep")
    recorded = recorded_fingerprint(checkpoint)
    if recorded is not None and recorded != tokenizer_fingerprint(tokenizer):
        raise UserError(f"the tokenizer found for {str(path)!r} is not the one it recorded (fingerprint {recorded})")
    with atomic_directory(out, "tokenizer_config.json") as staging:
        tokenizer.save_pretrained(staging)
    return out


def parser() -> CommandParser:
    parser = CommandParser(prog="python -m tiedemb.data.keep_tokenizer", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a pretraining checkpoint, or a run's or sweep cell's folder")
    parser.add_argument("out", type=Path, help="the folder to save the tokenizer in (absent or empty)")
    add_weights_only(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = report_user_errors(lambda: keep_tokenizer(args.run, args.out, args.weights_only))
    if isinstance(result, int):
        return result
    from tiedemb.data.tokenizers import load_tokenizer, tokenizer_fingerprint

    print(f"kept the run's tokenizer in {result} (fingerprint {tokenizer_fingerprint(load_tokenizer(str(result)))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
