"""The table of docs/audit.md: well-known architectures at reduced depth, audited.

Each architecture is built with transformers' config class at its real width and vocabulary
size but DEPTH layers (2), with transformers' own random initialisation (seed 0), and measured on
4 x 64 token ids drawn from a Zipf distribution over its vocabulary (``tiedemb audit`` with its
defaults and ``--remedy``). Rerun with::

    PYTHONPATH=. python benchmarks/audit_table.py > table.md

It takes a few minutes on two CPU cores and about 10 GB of memory (the Gemma-like 256k vocabulary).
"""

from __future__ import annotations

import sys
import time

from tiedemb.weights.audit.report import verdict
from tiedemb.weights.audit.run import audit

DEPTH = 2
ARCHITECTURES: list[tuple[str, str, dict]] = [
    ("GPT-2 small", "gpt2", {"n_layer": DEPTH}),
    ("BERT-base", "bert", {"num_hidden_layers": DEPTH}),
    (
        "ALBERT-base",
        "albert",
        {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072, "num_hidden_layers": DEPTH},
    ),
    ("T5-small", "t5", {"num_layers": DEPTH}),
    (
        "SmolLM-135M-like",
        "llama",
        {
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
            "tie_word_embeddings": True,
            "num_hidden_layers": DEPTH,
        },
    ),
    (
        "Qwen2.5-0.5B-like",
        "qwen2",
        {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "num_hidden_layers": DEPTH,
        },
    ),
    (
        "Llama-3.2-1B-like",
        "llama",
        {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "tie_word_embeddings": True,
            "num_hidden_layers": DEPTH,
        },
    ),
    (
        "Gemma-2B-like",
        "gemma",
        {
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "vocab_size": 256000,
            "num_hidden_layers": DEPTH,
        },
    ),
]
REMEDY_COLUMNS = ("untie", "scaled_init", "shuffle", "orth")


def row(name: str, model_type: str, overrides: dict) -> str:
    result = audit(model_type=model_type, overrides=overrides, remedies=True)
    arch = result.arch
    remedies = {r.name: r for r in result.remedies}
    cells = [
        name,
        model_type,
        str(arch.hidden_size) + (f" (table {arch.table_width})" if arch.table_width != arch.hidden_size else ""),
        str(arch.vocab_size),
        "tied" if arch.tied else "untied",
        f"{result.branch_ratio:.2f}",
        f"{result.predicted.loss:.2f}",
        f"{result.predicted_with_branches.loss:.2f}",
        f"**{result.measured:.2f}**",
        f"{result.log_n:.2f}",
        f"{result.measured - result.log_n:+.2f}",
        f"{result.copy_rate:.0%}",
        "2-gram" if result.two_gram else "near ln n" if result.measured - result.log_n < 1 else "above ln n",
    ]
    for column in REMEDY_COLUMNS:
        remedy = remedies[column]
        cells.append(
            "n/a" if remedy.not_applicable else f"{remedy.predicted_with_branches:.2f} / {remedy.measured:.2f}"
        )
    print(f"{name}: {verdict(result)}", file=sys.stderr)
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    print(f"Depth {DEPTH} layers, real widths and vocabularies; seed 0; 4 x 64 Zipf-drawn ids; nats.\n")
    print(
        "| architecture | model_type | d | n | head | residual ratio | predicted (near identity) | "
        "predicted (with branches) | measured | ln n | measured - ln n | copies | verdict | "
        "untie | σ = (ln n)/d | shuffle | orth |"
    )
    print("|" + "---|" * 17)
    for name, model_type, overrides in ARCHITECTURES:
        start = time.perf_counter()
        print(row(name, model_type, overrides), flush=True)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print("\nRemedy columns: predicted (with the measured branches) / measured initial loss.")


if __name__ == "__main__":
    main()
