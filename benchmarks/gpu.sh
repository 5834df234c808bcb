#!/usr/bin/env bash
# Every GPU-only measurement in one command; see benchmarks/gpu.py (--dry-run-on-cpu checks it on a CPU).
cd "$(dirname "$0")/.." || exit 1
exec python benchmarks/gpu.py "$@"
