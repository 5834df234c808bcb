#!/usr/bin/env bash
# The width study's full-scale recipe (configs/sweeps/width_ratios_gpu.yaml): BERT-base (hidden 768)
# pretrained at d_e 128 / 256 / 384 / 512 / 768 with the untied_orth control at 128 and 768, then
# MNLI and MRPC fine-tuning, 3 seeds; then the report.
#
#   bash benchmarks/width_full_scale.sh [OUT]          # default OUT: runs/width_ratios_gpu
#   bash benchmarks/width_full_scale.sh --dry-run      # validate every cell and print its command
#
# Estimated device time on one H100/H200 (from FLOP counts at an assumed 400 TFLOP/s, not measured):
# about 8.5 GPU-hours of pretraining (7 runs x 100k steps x ~1.2 h) and 3.5-7 of fine-tuning
# (15 MNLI x 10-25 min, 15 MRPC x a few minutes): about 12-16 GPU-hours. It does not fit a
# 15-minute device loan; run it where a GPU is held for a day, or one cell per job with --cell N.
# A resumed command skips finished cells and continues the others from their last checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP=configs/sweeps/width_ratios_gpu.yaml
if [[ "${1:-}" == "--dry-run" ]]; then
  exec python -m tiedemb.sweep "$SWEEP" --out "${2:-runs/width_ratios_gpu}" --dry-run
fi
OUT="${1:-runs/width_ratios_gpu}"
python -m tiedemb.sweep "$SWEEP" --out "$OUT"
python -m tiedemb.report "$OUT"
