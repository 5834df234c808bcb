"""What the C allocator costs a training step on the CPU, and how to take it out of a comparison.

glibc's ``malloc`` serves a large block (above a threshold that adapts up to 32 MiB) with a fresh
mapping from the kernel and unmaps it on ``free``; smaller freed blocks at the top of the heap are
returned to the kernel once they exceed the trim threshold. Either way the next step's large
temporaries land on pages the kernel must map again, and every first touch of such a page is a
fault (on a virtual machine, an expensive one). A step that creates the same large temporaries
every time pays this every step, as system time. The benchmarks report that share and can switch
it off for both sides, so a comparison can show the computation alone.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
from dataclasses import dataclass

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_MAX = -4


def keep_freed_memory() -> None:
    """Make glibc keep freed memory mapped in this process: no per-block mappings, no trimming.

    Call it before the large allocations; it applies to the whole process (every model in it).
    """
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        raise SystemExit("--keep-freed-memory needs glibc's malloc (mallopt); this C library has none")
    if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)):
        raise SystemExit("--keep-freed-memory: mallopt refused the settings")


def add_option(parser: argparse.ArgumentParser) -> None:
    """``--keep-freed-memory``, the same in every benchmark that compares models in one process."""
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="glibc keeps freed memory mapped in the process, for every model alike (no fresh page "
        "faults for large temporaries each step): the ratios of the computation alone (glibc only)",
    )


@dataclass
class CpuTime:
    """This process's user and system CPU seconds, summed over the intervals given to ``add``."""

    user: float = 0.0
    system: float = 0.0

    def add(self, before: os.times_result, after: os.times_result) -> None:
        self.user += after.user - before.user
        self.system += after.system - before.system

    @property
    def system_share(self) -> float:
        """The share of the CPU time spent in the kernel (mostly mapping pages for fresh memory)."""
        total = self.user + self.system
        return self.system / total if total > 0 else 0.0
