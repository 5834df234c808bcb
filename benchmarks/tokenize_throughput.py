"""Tokenisation throughput: the text preparation pipeline against a bare ``Tokenizer.encode_batch``.

Both tokenise the same non-empty lines of a text file without special tokens. The pipeline
figure is its ``datasets.map`` step (the part that scales with the corpus), run on a fresh,
uncached dataset each round; an end-to-end preparation into a fresh cache directory is
timed as well, for reference. Each figure is the best of several interleaved rounds, so load
from other processes on a shared machine distorts them less. The target is a pipeline at
70% or more of the bare rate.

    python benchmarks/tokenize_throughput.py --repeat 8 --rounds 5
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import datasets
from tokenizers import Tokenizer

from tiedemb.data import text
from tiedemb.data.tokenizers import configure_for_objective, load_tokenizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def read_lines(path: Path, repeat: int) -> list[str]:
    """The file's non-empty lines, repeated to make a corpus big enough to time reliably."""
    with path.open(encoding="utf-8-sig") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    return lines * repeat


def time_bare(backend: Tokenizer, lines: list[str], fast: bool = False) -> tuple[float, int]:
    """``encode_batch``, or with ``fast`` its variant without character offsets (what the pipeline calls)."""
    encode = backend.encode_batch_fast if fast else backend.encode_batch
    start = time.perf_counter()
    encodings = encode(lines, add_special_tokens=False)
    seconds = time.perf_counter() - start
    return seconds, sum(len(encoding.ids) for encoding in encodings)


def time_pipeline(lines: list[str], tokenizer, separator: int, num_proc: int | None, tag: str) -> float:
    start = time.perf_counter()
    documents = datasets.Dataset.from_dict({"text": lines})
    text._tokenize_documents(documents, tokenizer, separator, num_proc, tag)
    return time.perf_counter() - start


def time_prepare(lines: list[str], tokenizer_dir: str, num_proc: int | None) -> tuple[float, float]:
    """Seconds for a whole preparation (``plan_text``, ``write``) in a fresh cache directory, and its tokens."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        start = time.perf_counter()
        prepared = text.plan_text(
            {
                "tokenizer": tokenizer_dir,
                "train_files": [str(corpus)],
                "text_column": "text",
                "block_size": 128,
                "val_fraction": text.VAL_FRACTION,
                "corpus_seed": 0,
                "num_proc": num_proc,
                "cache_dir": str(Path(tmp) / "cache"),
            },
            "mlm",
        )
        prepared.write()
        seconds = time.perf_counter() - start
        stats = prepared.stats()
    return seconds, stats["train_tokens"] + stats["val_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=SHARED / "text" / "wikitext-2-valid.txt")
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "bert-base-uncased"))
    parser.add_argument("--repeat", type=int, default=8, help="copies of the file's lines in the corpus")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds; the best is reported")
    parser.add_argument("--num-proc", type=int, default=None, help="datasets.map processes (default: one)")
    parser.add_argument("--batch-size", type=int, default=text.MAP_BATCH_SIZE, help="rows per datasets.map batch")
    args = parser.parse_args()

    datasets.disable_progress_bars()
    logging.getLogger("tiedemb.data").setLevel(logging.WARNING)
    text.MAP_BATCH_SIZE = args.batch_size
    lines = read_lines(args.file, args.repeat)
    tokenizer = load_tokenizer(args.tokenizer)
    separator = configure_for_objective(tokenizer, "mlm")
    backend = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))

    bare, bare_fast, pipeline, tokens = [], [], [], 0
    for round_ in range(args.rounds):
        seconds, tokens = time_bare(backend, lines)
        bare.append(seconds)
        bare_fast.append(time_bare(backend, lines, fast=True)[0])
        pipeline.append(time_pipeline(lines, tokenizer, separator, args.num_proc, f"bench-{round_}"))
    prepare_seconds, prepare_tokens = time_prepare(lines, args.tokenizer, args.num_proc)

    bare_rate, pipeline_rate = tokens / min(bare), tokens / min(pipeline)
    print(
        f"corpus: {len(lines):,} lines, {tokens:,} tokens; map batch size {args.batch_size}, num_proc {args.num_proc}"
    )
    print(f"bare Tokenizer.encode_batch:   {bare_rate:12,.0f} tokens/s  (best of {args.rounds}: {min(bare):.3f} s)")
    print(
        f"bare encode_batch_fast:        {tokens / min(bare_fast):12,.0f} tokens/s  "
        f"(best of {args.rounds}: {min(bare_fast):.3f} s)"
    )
    print(
        f"prepare_text map step:         {pipeline_rate:12,.0f} tokens/s  "
        f"(best of {args.rounds}: {min(pipeline):.3f} s)"
    )
    print(f"ratio pipeline / bare:         {pipeline_rate / bare_rate:12.2f}  (target >= 0.70)")
    print(f"ratio pipeline / bare fast:    {pipeline_rate * min(bare_fast) / tokens:12.2f}")
    print(
        f"whole prepare_text, fresh cache: {prepare_tokens / prepare_seconds:10,.0f} tokens/s  "
        f"({prepare_seconds:.3f} s, read + split + tokenise + block + save)"
    )


if __name__ == "__main__":
    main()
