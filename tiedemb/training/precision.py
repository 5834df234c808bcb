"""``trainer.precision: bf16-mixed-if-native``: bf16-mixed where the hardware computes bfloat16 (CUDA
GPUs from Ampere on, CPUs with AVX512-BF16 or AMX), 32-true where torch would emulate it many times
slower than float32 (benchmarks/RESULTS.md); an explicit bf16 setting there is kept, with a warning.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_type_hints

import lightning as L
import torch
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

PrecisionIfNative = Literal["bf16-mixed-if-native"]
LightningPrecision = get_type_hints(L.Trainer.__init__)["precision"]
"""The values Lightning's ``Trainer(precision=...)`` takes, read from its public signature."""
BF16_IF_NATIVE: str = get_args(PrecisionIfNative)[0]


def runs_on_cpu(accelerator: Any) -> bool:
    """Whether a Trainer given this ``accelerator`` setting (a name or an Accelerator) trains on the CPU."""
    if isinstance(accelerator, CPUAccelerator):
        return True
    if isinstance(accelerator, str):
        return accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    return accelerator is None and not torch.cuda.is_available()


def bf16_is_native(on_cpu: bool) -> bool:
    """Whether this machine computes bfloat16 products in hardware (not through fallback kernels)."""
    if on_cpu:
        # torch's runtime CPU feature report (cpuinfo); torch versions without it are taken as emulating bf16
        capabilities = getattr(torch.cpu, "get_capabilities", dict)()
        return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def resolve_precision(precision: Any, accelerator: Any) -> Any:
    """``precision`` for Lightning's Trainer: ``bf16-mixed-if-native`` resolved, said in one line."""
    on_cpu = runs_on_cpu(accelerator)
    if precision == BF16_IF_NATIVE:
        native = bf16_is_native(on_cpu)
        chosen = "bf16-mixed" if native else "32-true"
        device = "this CPU" if on_cpu else "this GPU"
        rank_zero_info(
            f"trainer.precision={BF16_IF_NATIVE}: {chosen} ({device} "
            f"{'computes' if native else 'has no hardware for'} bfloat16)"
        )
        return chosen
    if on_cpu and str(precision).startswith("bf16") and not bf16_is_native(on_cpu):
        rank_zero_warn(
            f"trainer.precision={precision} on a CPU without bfloat16 instructions (AVX512-BF16 or AMX): "
            f"torch emulates it, many times slower than 32-true; {BF16_IF_NATIVE} picks 32-true here",
            category=UserWarning,
        )
    return precision
