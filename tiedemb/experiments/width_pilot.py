"""``python -m tiedemb.experiments.width_pilot RUNS``: read the width study's pilot, print the step count.

RUNS is the pilot's output folder (configs/sweeps/width_pilot_cpu.yaml): one finished pretraining run at
the narrowest and one at the full width. Prints, every ``--every`` evaluations, the gap (narrow minus
full validation loss, each curve averaged over the evaluations within ``--window`` steps), the gap at
(1 - fraction) of that step and the change between them; then the rule's reading
(``tiedemb.experiments.width_study.pilot_reading``): the first step whose change is below the seed
noise, rounded up, which is the study's ``trainer.max_steps``, at most ``--cap`` (the budget's
largest step count); where no step meets the rule, the cap.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiedemb.errors import UserError
from tiedemb.experiments.aggregate import pretraining_runs
from tiedemb.experiments.runs import find_runs
from tiedemb.experiments.width_study import (
    PILOT_CAP,
    PILOT_FRACTION,
    PILOT_ROUND,
    PILOT_WINDOW,
    SEED_NOISE,
    gap,
    pilot_reading,
    smoothed,
    value_at,
)
from tiedemb.options import NonNegativeFloat, NonNegativeInt, PositiveInt, UnitFraction
from tiedemb.training.exits import CommandParser, report_user_errors
from tiedemb.training.metric_names import VAL_LOSS


def pilot_curves(root: Path) -> tuple[tuple[int, list], tuple[int, list]]:
    """((d_e, curve) of the narrowest, (d_e, curve) of the widest) finished pretraining run under ``root``."""
    runs = [run for run in pretraining_runs(find_runs(root)) if run.labels.get("d_e", "").isdigit()]
    by_width = {int(run.labels["d_e"]): run for run in runs}
    if len(by_width) < 2:
        raise UserError(
            f"{str(root)!r} holds finished pretraining runs at {len(by_width)} width(s); the pilot needs "
            "the narrowest and the full width"
        )
    narrow, full = min(by_width), max(by_width)
    fingerprints = {by_width[narrow].tokenizer_fingerprint, by_width[full].tokenizer_fingerprint}
    if len(fingerprints - {None}) > 1:
        raise UserError(f"the pilot's runs at d_e {narrow} and {full} read different tokenizers; run it again")
    return (narrow, by_width[narrow].series(VAL_LOSS)), (full, by_width[full].series(VAL_LOSS))


def describe(root: Path, sigma: float, fraction: float, window: int, every: int, cap: int) -> str:
    (narrow, narrow_curve), (full, full_curve) = pilot_curves(root)
    gaps = gap(smoothed(narrow_curve, window), smoothed(full_curve, window))
    lines = [f"gap = val/loss at d_e {narrow} - at d_e {full} (each averaged over ±{window} steps)", ""]
    lines.append(f"{'step':>7} {'gap':>8} {'gap at ' + format(1 - fraction, 'g') + ' step':>16} {'change':>8}")
    for index, (step, value) in enumerate(gaps):
        earlier = value_at(gaps, (1 - fraction) * step)
        if index % every == 0 or index == len(gaps) - 1:
            shown = f"{earlier:8.4f}" if earlier is not None else f"{'–':>8}"
            change = f"{value - earlier:+8.4f}" if earlier is not None else f"{'–':>8}"
            lines.append(f"{step:7d} {value:8.4f} {shown:>16} {change}")
    reading = pilot_reading(narrow_curve, full_curve, sigma, fraction, window)
    lines.append("")
    if reading is None:
        last = gaps[-1][0] if gaps else 0
        lines.append(
            f"the gap still changes by {sigma:g} nats or more over the last {fraction:.0%} of every step up to "
            f"{last}: no step count meets the rule; trainer.max_steps = {cap} (the budget's cap), and the "
            "report says the gap was still moving there"
        )
    else:
        lines.append(
            f"rule met at step {reading.step}: gap {reading.gap:.4f}, at step {reading.earlier:.0f} "
            f"{reading.earlier_gap:.4f}, change {reading.change:+.4f} (|change| < sigma = {sigma:g})"
        )
        if reading.chosen > cap:
            lines.append(f"trainer.max_steps = {cap}: the rule's {reading.chosen} is over the budget's cap")
        else:
            lines.append(f"trainer.max_steps = {reading.chosen} (rounded up to a multiple of {PILOT_ROUND})")
    return "\n".join(lines)


def parser() -> CommandParser:
    parser = CommandParser(prog="python -m tiedemb.experiments.width_pilot", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="the pilot's output folder")
    parser.add_argument("--sigma", type=NonNegativeFloat, default=SEED_NOISE, help="seed noise (nats)")
    parser.add_argument("--fraction", type=UnitFraction, default=PILOT_FRACTION, help="the last share of the steps")
    parser.add_argument("--window", type=NonNegativeInt, default=PILOT_WINDOW, help="smoothing, steps")
    parser.add_argument(
        "--cap",
        type=PositiveInt,
        default=PILOT_CAP,
        help="the most steps the budget allows (width_pilot_cpu.yaml)",
    )
    parser.add_argument("--every", type=PositiveInt, default=5, help="print every Nth evaluation")
    return parser


def main(argv: list[str] | None = None) -> int:
    args: argparse.Namespace = parser().parse_args(argv)
    result = report_user_errors(
        lambda: describe(args.runs, args.sigma, args.fraction, args.window, args.every, args.cap)
    )
    if isinstance(result, int):
        return result
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
