"""``benchmarks/gpu.sh --dry-run-on-cpu``: every step of the GPU measurement script runs on the CPU
and ends in the summary table, so the script is known to work before it meets a GPU.

The run starts four processes (train_step.py, two ``main.py fit`` runs, ``pytest -m gpu``), each
importing torch, Lightning and transformers: about a minute of CPU time in all, hence ``slow``.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_dry_run_prints_a_row_per_step_with_numbers(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    result = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks" / "gpu.sh"),
            "--dry-run-on-cpu",
            "--steps",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--json",
            str(summary),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {row["step"]: row for row in json.loads(summary.read_text())["rows"]}
    expected = [
        f"train_step {objective} {model}"
        for objective, model in (
            ("mlm", "tiedemb"),
            ("mlm", "BertForMaskedLM"),
            ("clm", "tiedemb"),
            ("clm", "GPT2LMHeadModel"),
        )
    ]
    expected += ["fit tied_orth+base", "fit width bert_base", "pytest -m gpu"]
    assert list(rows) == expected

    for name in expected[:6]:
        row = rows[name]
        assert row["result"] == "ok", row
        # Measured figures: tokens/s, utilisation against the measured matmul peak, peak memory.
        # MFU needs a known GPU's spec peak, so it is absent on the CPU.
        assert is_number(row["tokens_per_sec"]) and is_number(row["util"]) and is_number(row["peak_mib"]), row
        assert row["mfu"] is None
    for name in expected[:4]:  # the profiled steps: the share of matrix products, in the record and the note
        share = rows[name]["extra"]["matrix_product_share"]
        assert 0 < share < 1 and f"matrix products {share:.0%}" in rows[name]["note"], rows[name]
    assert is_number(rows["train_step mlm tiedemb"]["seconds"])
    for name in ("fit tied_orth+base", "fit width bert_base"):
        fit = rows[name]
        assert is_number(fit["seconds"]) and fit["extra"]["bench/timed_steps"] == 1
        assert fit["extra"]["bench/peak_memory_kind"] == 0.0  # the CPU's resident set, said so in the notes
        assert "module-logged" in fit["note"] and "peak RSS" in fit["note"]
        assert math.isfinite(fit["extra"]["val/loss"])  # the validation after the last step ran
    tests = rows["pytest -m gpu"]
    assert tests["result"] == "skipped: no CUDA"
    assert tests["extra"]["skipped"] > 0 and tests["extra"]["passed"] == tests["extra"]["failed"] == 0

    # The printed table: one line per step, each with a number in its timing or throughput columns.
    table = result.stdout[re.search(r"^step\s+result", result.stdout, re.MULTILINE).start() :]
    for name in expected:
        line = next(line for line in table.splitlines() if line.startswith(name))
        assert re.search(r"\d", line[len(name) :]), line
    assert re.search(r"^pytest -m gpu\s+skipped: no CUDA\s+\d+", table, re.MULTILINE)
