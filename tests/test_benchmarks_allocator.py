"""``benchmarks/allocator.py``: the switch that keeps freed memory in the process, and the CPU-time split."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from run_if import run_if

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from allocator import CpuTime  # noqa: E402

# A 64 MiB block from malloc, written, freed; the process's resident memory before and after the free.
PROBE = textwrap.dedent("""
    import ctypes, ctypes.util, os, sys
    sys.path.insert(0, {benchmarks!r})
    import allocator
    if sys.argv[1] == "keep":
        allocator.keep_freed_memory()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    size = 64 * 2**20
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    held = resident()
    libc.free(block)
    print(held - resident())
""")


@run_if(linux=True)
def test_freed_memory_stays_mapped_only_when_asked() -> None:
    returned = {}
    for mode in ("stock", "keep"):
        result = subprocess.run(
            [sys.executable, "-c", PROBE.format(benchmarks=str(ROOT / "benchmarks")), mode],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        returned[mode] = int(result.stdout)
    # The stock allocator unmaps a freed 64 MiB block at once; kept, it stays resident for reuse.
    assert returned["stock"] >= 60 * 2**20
    assert returned["keep"] < 4 * 2**20


def test_system_share_is_the_kernel_part_of_the_cpu_time() -> None:
    cpu = CpuTime()
    cpu.add(os.times_result((1.0, 0.5, 0, 0, 0)), os.times_result((2.5, 1.0, 0, 0, 0)))  # 1.5 user, 0.5 system
    cpu.add(os.times_result((0.0, 0.0, 0, 0, 0)), os.times_result((0.5, 0.5, 0, 0, 0)))  # 0.5 user, 0.5 system
    assert (cpu.user, cpu.system) == (2.0, 1.0)
    assert cpu.system_share == pytest.approx(1 / 3)
    assert CpuTime().system_share == 0.0
