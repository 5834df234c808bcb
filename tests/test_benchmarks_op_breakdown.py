"""``benchmarks/op_breakdown.py``: the per-step operator breakdown ``train_step.py --profile`` prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from op_breakdown import Breakdown, OpTime, op_breakdown  # noqa: E402

CPU = torch.device("cpu")


def test_a_step_of_products_is_almost_all_matrix_products():
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    breakdown = op_breakdown(lambda: a @ b @ b, steps=3, device=CPU)
    mm = next(op for op in breakdown.ops if op.name == "aten::mm")
    assert mm.calls_per_step == 2.0
    assert breakdown.matrix_product_share > 0.8
    assert breakdown.ops == tuple(sorted(breakdown.ops, key=lambda op: -op.seconds_per_step))


def test_a_step_without_products_has_none():
    x = torch.randn(1 << 20)
    breakdown = op_breakdown(lambda: torch.exp(x).sum(), steps=2, device=CPU)
    assert breakdown.matrix_product_share == 0.0
    assert {"aten::exp", "aten::sum"} <= {op.name for op in breakdown.ops}


def test_the_lines_give_the_share_and_the_bound_it_sets():
    breakdown = Breakdown((OpTime("aten::mm", 0.75, 2.0), OpTime("aten::_softmax", 0.25, 1.0)))
    first, *ops = breakdown.lines()
    assert "matrix products 75.0% of 1000.0 ms a step" in first
    assert "1.33x faster at most" in first
    assert ops[0].split()[:3] == ["aten::mm", "750.0", "ms"]
    assert len(ops) == 2


def test_no_steps_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        op_breakdown(lambda: None, steps=0, device=CPU)
