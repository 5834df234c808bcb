"""Where a training step's time goes, operator by operator (``torch.profiler``).

A step that runs its matrix products near the machine's peak can only get faster by doing less
of everything else; this says how much everything else is. The share of matrix products
(``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``linear``'s kernels) is the ceiling on what any change
outside them can save: removing every other operator would make the step ``1 / share`` times
faster. Times are each operator's own (self) time: CPU time on the CPU, device time on CUDA, per
step, averaged over the profiled steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

MATRIX_PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation"})


@dataclass(frozen=True)
class OpTime:
    name: str
    seconds_per_step: float
    calls_per_step: float


@dataclass(frozen=True)
class Breakdown:
    ops: tuple[OpTime, ...]  # every profiled event with time of its own, slowest first

    @property
    def total(self) -> float:
        return sum(op.seconds_per_step for op in self.ops)

    @property
    def matrix_product_share(self) -> float:
        total = self.total
        products = sum(op.seconds_per_step for op in self.ops if op.name in MATRIX_PRODUCTS)
        return products / total if total else 0.0

    def lines(self, top: int = 8) -> list[str]:
        total = self.total
        lines = [
            f"  matrix products {self.matrix_product_share:.1%} of {total * 1e3:.1f} ms a step "
            f"(without everything else the step would be {1 / max(self.matrix_product_share, 1e-9):.2f}x "
            "faster at most)"
        ]
        for op in self.ops[:top]:
            name = op.name if len(op.name) <= 40 else op.name[:39] + "…"
            lines.append(
                f"  {name:<40} {op.seconds_per_step * 1e3:>8.1f} ms {op.seconds_per_step / total:>6.1%}"
                f" {op.calls_per_step:>7.1f} calls"
            )
        return lines


def op_breakdown(step: Callable[[], None], steps: int, device: torch.device) -> Breakdown:
    """Profile ``steps`` calls of ``step`` (already warmed up) and return the per-step breakdown."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    ops = []
    for event in prof.key_averages():
        own = event.self_device_time_total if cuda else event.self_cpu_time_total  # microseconds
        if own > 0:  # operators, and the Python around them (autograd functions, the optimiser)
            ops.append(OpTime(event.key, own / 1e6 / steps, event.count / steps))
    return Breakdown(tuple(sorted(ops, key=lambda op: -op.seconds_per_step)))
