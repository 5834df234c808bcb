"""Peak memory and time of preparing a large text file for pretraining (``PretrainData``).

Generates a text file of ``--size-mb`` megabytes (lines of WikiText-2 validation, repeated; or
takes ``--text FILE``), then builds ``tiedemb.data.PretrainData`` on it in a child process with a
fresh cache, which reads, tokenises, blocks and saves the text. Reports the child's peak resident
memory (``ru_maxrss``) and wall time, and the same for an empty child that only imports tiedemb
(the baseline every process pays), so the difference is what the preparation itself holds.

    python benchmarks/prepare_memory.py --size-mb 1000      # the 1 GB figure
    python benchmarks/prepare_memory.py --size-mb 50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

CHILD = """
import json, sys, time
from tiedemb.data import PretrainData
arguments = json.loads(sys.argv[1])
started = time.perf_counter()
data = PretrainData(**arguments) if arguments else None
if data is not None:
    data.prepare_data()
print(json.dumps({"seconds": time.perf_counter() - started, "stats": data.text.stats() if data else {}}))
"""


def write_corpus(path: Path, size_mb: float, source: Path) -> None:
    """About ``size_mb`` MB of ``source``'s lines, repeated (written in 8 MB pieces)."""
    lines = source.read_bytes()
    target = int(size_mb * 1e6)
    with path.open("wb") as handle:
        written = 0
        while written < target:
            piece = lines[: target - written]
            handle.write(piece)
            written += len(piece)
        handle.write(b"\n")


def run_child(arguments: dict, work: Path) -> dict:
    """Run ``CHILD`` and return its report with its own peak resident memory in MiB (``os.wait4``)."""
    output, errors = work / "child.out", work / "child.err"
    started = time.perf_counter()
    with output.open("w") as out, errors.open("w") as err:
        child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(arguments)], cwd=ROOT, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here; tell Popen so it does not wait again
    if child.returncode != 0:
        sys.exit(f"the preparation failed:\n{errors.read_text()[-3000:]}")
    report = json.loads(output.read_text().strip().splitlines()[-1])
    # ru_maxrss is in KiB on Linux; CPU seconds tell more than wall time on a machine shared with other jobs
    return report | {"wall": wall, "peak_mib": usage.ru_maxrss / 1024, "cpu": usage.ru_utime + usage.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--size-mb", type=float, default=1000.0, help="size of the generated text file (default 1000 MB)"
    )
    parser.add_argument("--text", type=Path, default=None, help="a text file to prepare instead of a generated one")
    parser.add_argument(
        "--source",
        type=Path,
        default=SHARED / "text" / "wikitext-2-valid.txt",
        help="the lines the generated file repeats",
    )
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "bert-base-uncased"))
    parser.add_argument("--num-proc", type=int, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="prepare-memory-") as work:
        corpus = args.text or Path(work) / "corpus.txt"
        if args.text is None:
            write_corpus(corpus, args.size_mb, args.source)
        size = corpus.stat().st_size
        baseline = run_child({}, Path(work))
        report = run_child(
            {
                "train_files": [str(corpus)],
                "tokenizer": args.tokenizer,
                "cache_dir": str(Path(work) / "cache"),
                "num_proc": args.num_proc,
                "block_size": 128,
            },
            Path(work),
        )
    stats = report["stats"]
    print(
        f"text: {size / 1e6:,.0f} MB, {stats['documents']:,.0f} documents, "
        f"{stats['train_tokens'] + stats['val_tokens']:,.0f} tokens"
    )
    print(
        f"preparation: {report['seconds']:,.1f} s in the child ({report['wall']:,.1f} s wall with imports, "
        f"{report['cpu']:,.1f} CPU seconds)"
    )
    print(
        f"peak resident memory of the child: {report['peak_mib']:,.0f} MiB "
        f"(a child that only imports tiedemb: {baseline['peak_mib']:,.0f} MiB)"
    )


if __name__ == "__main__":
    main()
