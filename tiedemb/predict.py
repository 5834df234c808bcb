"""``tiedemb predict RUN --input pairs.tsv``: a GLUE run's classifier labels new sentence pairs.

RUN is a run folder (its ``best.ckpt``, else ``last.ckpt``; ``--checkpoint`` picks another) or a
``.ckpt`` file. The input holds one example a row, its sentences tab-separated, or has a header
naming them as GLUE's files do (a GLUE ``test.tsv``, whose ``index`` column is kept). Written:
``--output`` (never over an existing file), a row per example with its label and each label's
probability, and with ``--submission DIR`` GLUE's submission file. Without RUN, ``tiedemb predict
--config ...`` is the LightningCLI's ``predict`` (``tiedemb.command`` decides).
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.options import PositiveInt, add_weights_only
from tiedemb.training.exits import CommandParser, report_user_errors

PREDICTIONS = "predictions.tsv"


@dataclass
class Examples:
    """The input's rows: each example's index and its sentences, column by column."""

    index: list[str]
    texts: list[list[str]]


def glue_task(checkpoint: dict[str, Any], origin: str):
    """The GLUE task a checkpoint's classifier was fine-tuned on; other runs refused."""
    from tiedemb.data.glue_tasks import TASKS
    from tiedemb.weights.source import checkpoint_kind

    hparams = checkpoint.get("hyper_parameters") or {}
    if checkpoint_kind(checkpoint) != "glue":
        kind = "next-token" if hparams.get("objective") == "clm" else "masked-token"
        continues = "; `tiedemb export` makes it a transformers causal LM, whose generate() continues text"
        hint = continues if kind == "next-token" else ""
        raise UserError(f"{origin!r} is a {kind} pretraining run, not a GLUE classifier{hint}")
    task = TASKS.get(str(hparams.get("task") or "").lower())
    if task is None:
        raise UserError(f"{origin!r} records no GLUE task tiedemb knows (task={hparams.get('task')!r})")
    return task


def read_examples(path: Path, task) -> Examples:
    """The input file's examples (see the module's text for the two layouts)."""
    if not path.is_file():
        raise UserError(
            f"--input {str(path)!r} {'is a folder' if path.is_dir() else 'does not exist'}; pass a .tsv file"
        )
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = [row for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if row]
    except UnicodeDecodeError:
        raise UserError(f"--input {str(path)!r} is not UTF-8 text") from None
    if not rows:
        raise UserError(f"--input {str(path)!r} holds no rows")
    wanted = len(task.text_columns)
    header = rows[0]
    for names in (task.classic.text_columns, task.text_columns):
        if all(name in header for name in names):
            columns = [header.index(name) for name in names]
            index = header.index(task.classic.index_column) if task.classic.index_column in header else None
            body = rows[1:]
            short = next((number for number, row in enumerate(body, 2) if len(row) <= max(columns)), None)
            if short is not None:
                raise UserError(f"--input {str(path)!r} line {short} has fewer fields than its header")
            return Examples(
                [row[index] if index is not None else str(number) for number, row in enumerate(body)],
                [[row[column] for row in body] for column in columns],
            )
    bad = next((number for number, row in enumerate(rows, 1) if len(row) != wanted), None)
    if bad is not None:
        names = " and ".join(task.classic.text_columns)
        raise UserError(
            f"--input {str(path)!r} line {bad} has {len(rows[bad - 1])} tab-separated fields; {task.name} takes "
            f"{wanted} per row (its sentences), or a header naming {names}"
        )
    return Examples([str(number) for number in range(len(rows))], [[row[i] for row in rows] for i in range(wanted)])


def probabilities(module, tokenizer, examples: Examples, max_length: int, batch_size: int):
    """Each example's label probabilities (N, num_labels)."""
    import torch

    results = []
    with torch.no_grad():
        for start in range(0, len(examples.index), batch_size):
            columns = [column[start : start + batch_size] for column in examples.texts]
            batch = tokenizer(
                *columns,
                truncation="longest_first",
                max_length=max_length,
                padding=True,
                return_token_type_ids=True,
                return_tensors="pt",
            )
            logits = module(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            results.append(torch.softmax(logits.float(), dim=-1))
    return torch.cat(results)


def predict(args: argparse.Namespace) -> list[Path]:
    """Write the predictions (and the submission file); the files written."""
    from tiedemb.data.text import run_tokenizer
    from tiedemb.modules.glue import GlueModule, write_predictions
    from tiedemb.training.checkpoints import read_checkpoint
    from tiedemb.training.files import write_tsv
    from tiedemb.training.run_dir import run_checkpoint

    path = run_checkpoint(args.run, args.checkpoint)
    checkpoint = read_checkpoint(path, weights_only=args.weights_only)
    task = glue_task(checkpoint, str(args.run))
    examples = read_examples(Path(args.input).expanduser(), task)
    output = Path(args.output).expanduser()
    if output.is_dir():
        raise UserError(f"--output {str(output)!r} is a folder; pass a file name")
    submission = Path(args.submission).expanduser() if args.submission else None
    if submission is not None and submission.exists() and not submission.is_dir():
        raise UserError(f"--submission {str(submission)!r} is a file; pass the folder to write {task.name}'s file in")
    tokenizer = run_tokenizer(checkpoint, path)
    max_length = int((checkpoint.get("datamodule_hyper_parameters") or {}).get("max_length") or 128)
    del checkpoint
    module = GlueModule.load_from_checkpoint(path, map_location="cpu", weights_only=args.weights_only).eval()
    found = probabilities(module, tokenizer, examples, max_length, args.batch_size)
    chosen = found.argmax(dim=-1).tolist()
    names = task.label_names
    header = ["index", "label", *(f"p_{name}" for name in names)]
    rows = [
        [index, names[label], *(f"{value:.6f}" for value in row)]
        for index, label, row in zip(examples.index, chosen, found.tolist())
    ]
    written = [write_tsv(output.parent, output.name, header, rows)]
    if submission is not None:
        split = "test_mismatched" if "mismatched" in Path(args.input).name else task.test_splits[0]
        rows = zip(examples.index, chosen)
        written.append(write_predictions(submission, task.submission_files[split], task, rows))
    return written


def parser() -> CommandParser:
    parser = CommandParser(
        prog="tiedemb predict",
        description="Label sentence pairs (or sentences) with a GLUE run's classifier: labels and probabilities, "
        "and GLUE's submission file. Without RUN, `tiedemb predict --config ...` is the LightningCLI's predict.",
    )
    parser.add_argument("run", help="a GLUE run's folder (runs/<name>) or a .ckpt file")
    parser.add_argument(
        "--input", required=True, help="a .tsv: the task's sentences per row, or a GLUE file with its header"
    )
    parser.add_argument(
        "--output", default=PREDICTIONS, help=f"the file to write (default {PREDICTIONS}; never over an existing one)"
    )
    parser.add_argument("--submission", default=None, metavar="DIR", help="also write GLUE's submission file there")
    parser.add_argument("--batch-size", type=PositiveInt, default=32, help="pairs per batch (default 32)")
    parser.add_argument(
        "--checkpoint", default=None, help="in a run folder: best (default, else last), last, or a file name"
    )
    add_weights_only(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = report_user_errors(lambda: predict(args))
    if isinstance(result, int):  # the exit status of a user error, already reported
        return result
    for path in result:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
