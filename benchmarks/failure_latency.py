"""How long the refusals that must not wait take: hub lookups offline or unreachable, a text with
no line break, and what the token cache saves.

The tests check what each of these does (the error, its wording, the cache hit); this script
times them: the first call in this process (imports and any probe included, as a user's command
meets it) and the best of ``--rounds`` calls after it (answers a process keeps, such as a probe's
result, make these shorter).

    python benchmarks/failure_latency.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens


def first_and_best(rounds: int, action: Callable[[], object]) -> tuple[float, float]:
    """The first call's seconds and the shortest of ``rounds`` calls after it; a UserError counts as done."""
    from tiedemb.errors import UserError

    times = []
    for _ in range(rounds + 1):
        start = time.perf_counter()
        try:
            action()
        except UserError:
            pass
        times.append(time.perf_counter() - start)
    return times[0], min(times[1:])


def hub_probe_on_a_dead_endpoint() -> None:
    from huggingface_hub import constants

    from tiedemb.training import hub

    constants.ENDPOINT = DEAD_ENDPOINT
    assert hub.hub_reachable(timeout=2.0) is False


def uncached_hub_tokenizer_offline() -> None:
    from tiedemb.data.tokenizers import load_tokenizer

    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        load_tokenizer("tiedemb-test/no-such-tokenizer")
    finally:
        del os.environ["HF_HUB_OFFLINE"]


def glue_from_an_unreachable_hub(tokenizer: Path) -> Callable[[], None]:
    def run() -> None:
        import huggingface_hub

        from tiedemb.data.glue import GlueData

        huggingface_hub.constants.ENDPOINT = DEAD_ENDPOINT
        GlueData("mrpc", str(tokenizer)).prepare_data()

    return run


def a_100_mb_line(folder: Path) -> Callable[[], None]:
    giant = folder / "giant.txt"
    with giant.open("wb") as handle:
        for _ in range(80):
            handle.write(b"word " * (1 << 18))

    def run() -> None:
        from tiedemb.data.text import read_files

        read_files([giant], "train", folder / "work")

    return run


def token_cache(text: Path, tokenizer: Path, folder: Path) -> tuple[float, float]:
    """(cold, warm) seconds of preparing ``text``: tokenising into a fresh cache, then reading it back."""
    from tiedemb.data.text import plan_text

    settings = dict(
        tokenizer=str(tokenizer),
        train_files=[str(text)],
        val_files=[str(text)],
        text_column="text",
        block_size=128,
        val_fraction=0.0,
        corpus_seed=0,
        cache_dir=str(folder / "cache"),
    )

    def prepare() -> None:
        cache = plan_text(settings, "mlm")
        cache.write()
        cache.open()

    start = time.perf_counter()
    prepare()
    cold = time.perf_counter() - start
    start = time.perf_counter()
    prepare()
    return cold, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, default=SHARED / "tokenizers" / "bert-base-uncased")
    parser.add_argument("--text", type=Path, default=SHARED / "text" / "wikitext-2-valid.txt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        rows = [
            ("hub probe, dead endpoint (timeout 2 s)", first_and_best(args.rounds, hub_probe_on_a_dead_endpoint)),
            ("hub tokenizer, offline, not cached", first_and_best(args.rounds, uncached_hub_tokenizer_offline)),
            (
                "GLUE from the hub, unreachable",
                first_and_best(args.rounds, glue_from_an_unreachable_hub(args.tokenizer)),
            ),
            ("100 MB text without a line break refused", first_and_best(args.rounds, a_100_mb_line(folder))),
        ]
        cold, warm = token_cache(args.text, args.tokenizer, folder)
    width = max(len(name) for name, _ in rows)
    print(f"{'':<{width}}  {'first s':>8}  {'best s':>8}")
    for name, (first, best) in rows:
        print(f"{name:<{width}}  {first:8.3f}  {best:8.3f}")
    print(f"prepare_text {args.text.name}: {cold:.3f} s tokenising, {warm:.3f} s from the cache ({cold / warm:.1f}x)")


if __name__ == "__main__":
    main()
