"""The embedding-width study's own evidence beside the source's three numbers (docs/science.md).

A width study is a sweep whose analysis names a ``common_target`` (configs/sweeps/width_ratios_cpu.yaml).
Its *ladder* is the levels that differ from the reference (the full width, ``128, output=tied``) in d_e
alone, ordered by d_e. The source's numbers are fine-tuned accuracy points of BERT-base (hidden 768),
this study's masked-token losses in nats at its own hidden size: they stand side by side, in their own
units, matched by the share d_e / hidden.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy

from tiedemb.experiments.aggregate import Table, summarise
from tiedemb.experiments.claims import HOLDS, Analysis, steps_to_target, verdict
from tiedemb.experiments.evidence import RunNumbers, paired, paired_seeds
from tiedemb.training.metric_names import VAL_LOSS

Numbers = Mapping[str, Mapping[str, Mapping[str, RunNumbers]]]  # study -> level -> seed -> numbers

SOURCE_HIDDEN = 768
SOURCE_GAINS = {(128, 256): 1.3, (256, 384): 0.6, (512, 768): 0.3}
"""Points of fine-tuned accuracy each step up the source's ladder gains (no figure for 384 -> 512)."""
SOURCE_EPOCHS = {128: 5.2, 768: 3.0}
"""Fine-tuning epochs to converge at d_e 128 and 768 in the source: 5.2 / 3.0 = 1.73 (+73%)."""
SOURCE_SAVING = {384: "saves about 12M parameters (11% of BERT-base) for about 0.6 points"}
"""What the source says narrowing 768 -> d_e costs, by the source's d_e."""


# --------------------------------------------------------------------------- the ladder


def _suffix(level: str) -> str:
    return level.partition(",")[2].strip()


def ladder(levels: Mapping[str, Any], reference: str) -> list[tuple[int, str]]:
    """(d_e, level) of the levels that differ from ``reference`` in d_e alone, by d_e (narrowest first)."""
    found = []
    for level in levels:
        head, _, _ = level.partition(",")
        if _suffix(level) == _suffix(reference) and head.strip().isdigit():
            found.append((int(head), level))
    return sorted(found)


def source_width(d_e: int, full: int) -> int:
    """The source's d_e at the same share of its hidden size (21 of 128 -> 128 of 768): sixths, rounded."""
    return int(Fraction(round(6 * d_e / full), 6) * SOURCE_HIDDEN)


def share(d_e: int, full: int) -> str:
    """d_e as the sixth-based share of the full width the study was designed at (``1/6``, ``1/2``, ``1``)."""
    return str(Fraction(round(6 * d_e / full), 6))


# --------------------------------------------------------------------------- gap against steps


def gap(narrow: Sequence[tuple[int, float]], full: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """``narrow - full`` at each of ``narrow``'s evaluations within ``full``'s, ``full`` interpolated
    between its own evaluations where they fall elsewhere (runs whose epochs differ in length
    evaluate at other steps after the first epoch)."""
    theirs = sorted(full)
    found = []
    for step, value in sorted(narrow):
        other = value_at(theirs, step)
        if other is not None:
            found.append((step, value - other))
    return found


def gap_curves(numbers: Numbers, analysis: Analysis) -> dict[str, dict[str, list[tuple[int, float, float, float]]]]:
    """study -> level -> [(step, mean gap, lowest seed's, highest seed's)], the gap to the reference
    over the seeds both ran (and whose tokenizers agree), at the steps every such seed evaluated."""
    curves: dict[str, dict[str, list[tuple[int, float, float, float]]]] = {}
    for study, levels, reference, widths, _ in _ladders(numbers, analysis):
        for _, level in widths:
            if level == analysis.reference:
                continue
            per_seed = [
                dict(gap(levels[level][seed].run.series(VAL_LOSS), reference[seed].run.series(VAL_LOSS)))
                for seed in paired_seeds(levels, level, analysis.reference)
            ]
            if not per_seed:
                continue
            steps = sorted(set.intersection(*(set(gaps) for gaps in per_seed)))
            values = [[gaps[step] for gaps in per_seed] for step in steps]
            curves.setdefault(study, {})[level] = [
                (step, statistics.fmean(found), min(found), max(found)) for step, found in zip(steps, values)
            ]
    return curves


def value_at(curve: Sequence[tuple[int, float]], step: float) -> float | None:
    """The curve at ``step``, interpolated linearly between evaluations; None outside them."""
    if not curve or not curve[0][0] <= step <= curve[-1][0]:
        return None
    return float(numpy.interp(step, [s for s, _ in curve], [v for _, v in curve]))


# --------------------------------------------------------------------------- (a) diminishing returns


def gain_table(numbers: Numbers, analysis: Analysis) -> Table:
    rows, saturation = [], []
    for study, levels in numbers.items():
        widths = ladder(levels, analysis.reference)
        if len(widths) < 2:
            continue
        full = widths[-1][0]
        detectable = []  # the wider end of each step up whose gain's interval lies above zero
        for (narrow, low_level), (wide, high_level) in zip(widths, widths[1:]):
            # narrower minus wider: the loss widening saves
            gain = paired(levels, low_level, high_level, "final_loss", None)
            if verdict(gain, "higher", 0) == HOLDS:
                detectable.append(wide)
            source = (source_width(narrow, full), source_width(wide, full))
            rows.append(
                {
                    "study": study,
                    "d_e step": f"{narrow} → {wide}",
                    "share of hidden": f"{share(narrow, full)} → {share(wide, full)}",
                    "gain (nats)": gain.format(3),
                    "source step": f"{source[0]} → {source[1]}",
                    "source gain (points)": (
                        f"+{SOURCE_GAINS[source]:g}" if source in SOURCE_GAINS else "not reported"
                    ),
                }
            )
        # Saturated at the width after the last step up that gains detectably: no step from it does.
        saturated_at = max(detectable, default=widths[0][0])
        saturation.append(
            f"{study}: no saturation within the ladder (the last step up, to d_e {full}, still gains detectably)"
            if saturated_at == full
            else f"{study}: saturates at d_e {saturated_at} ({share(saturated_at, full)} of hidden): "
            "no step up from it gains detectably"
        )
    notes = [
        "gain: the narrower width's final validation loss minus the wider one's, paired by seed, mean [95% "
        "interval] (n = seeds both ran with one tokenizer); positive: widening lowers the loss",
        "source: BERT-base (hidden 768), fine-tuned accuracy points on MNLI and MRPC, 3 seeds, the same "
        "share of the hidden size (docs/science.md); saturation near d_e 384-512 (1/2-2/3)",
        *saturation,
    ]
    return Table(
        name="width_gains",
        title="(a) Diminishing returns: loss gained per step up the width ladder",
        rows=rows,
        notes=notes,
    )


# --------------------------------------------------------------------------- (b) convergence cost


def common_target(reference: Mapping[str, RunNumbers], fraction: float) -> float | None:
    """The reference level's mean validation loss at ``fraction`` of its run (interpolated)."""
    found = []
    for numbers in reference.values():
        curve = numbers.run.series(VAL_LOSS)
        if curve:
            value = value_at(curve, fraction * curve[-1][0])
            if value is not None:
                found.append(value)
    return statistics.fmean(found) if found else None


def _ratio(values: Sequence[float], bounded: bool) -> str:
    """The seeds' ratios: mean [95% interval of the mean] (n)."""
    stat = summarise(values)
    if stat is None:
        return "no paired seeds"
    bound = ", lower bound" if bounded else ""
    if stat.ci95 is None:
        return f"{stat.mean:.2f} (n = 1: no interval{bound})"
    return f"{stat.mean:.2f} [{stat.mean - stat.ci95:.2f}, {stat.mean + stat.ci95:.2f}] (n = {stat.n}{bound})"


def _ladders(numbers: Numbers, analysis: Analysis) -> Iterator[tuple[str, Any, Any, list[tuple[int, str]], int]]:
    """(study, its levels, its reference level's runs, its ladder, the full width) of each study with both."""
    for study, levels in numbers.items():
        reference, widths = levels.get(analysis.reference), ladder(levels, analysis.reference)
        if reference is not None and widths:
            yield study, levels, reference, widths, widths[-1][0]


def _steps_ratios(
    levels: Mapping[str, Mapping[str, RunNumbers]],
    level: str,
    reference: str,
    theirs: Mapping[str, float | None],
    target: float,
) -> tuple[list[float], list[float], bool]:
    """A level's steps to ``target`` and their ratios to the reference's (``theirs``, by seed), and whether
    any is a lower bound (a run that never reached the target: its last step stands in)."""
    ratios, steps, bounded = [], [], False
    for seed in paired_seeds(levels, level, reference):
        if not theirs.get(seed):
            continue
        found = levels[level][seed]
        mine = steps_to_target(found.run.series(VAL_LOSS), target)
        if mine is None:
            mine, bounded = float(found.last_step or 0), True
        steps.append(mine)
        ratios.append(mine / theirs[seed])
    return steps, ratios, bounded


def convergence_cost_table(numbers: Numbers, analysis: Analysis) -> Table:
    fraction = analysis.common_target or 0.5
    rows = []
    for study, levels, reference, widths, full in _ladders(numbers, analysis):
        target = common_target(reference, fraction)
        if target is None:
            continue
        reference_steps = {seed: steps_to_target(n.run.series(VAL_LOSS), target) for seed, n in reference.items()}
        for d_e, level in widths:
            steps, ratios, bounded = _steps_ratios(levels, level, analysis.reference, reference_steps, target)
            source = source_width(d_e, full)
            rows.append(
                {
                    "study": study,
                    "d_e": d_e,
                    "share of hidden": share(d_e, full),
                    "target (nats)": target,
                    "steps to target": statistics.fmean(steps) if steps else None,
                    "ratio to full width": _ratio(ratios, bounded),
                    "source": (
                        f"d_e {source}: {SOURCE_EPOCHS[source]:g} epochs, "
                        f"{SOURCE_EPOCHS[source] / SOURCE_EPOCHS[SOURCE_HIDDEN]:.2f} of 768's"
                        if source in SOURCE_EPOCHS
                        else "not reported"
                    ),
                }
            )
    notes = [
        f"target: the full width's ({analysis.reference}) mean validation loss at {fraction:g} of its run, "
        "fixed in the sweep file before the runs; steps: interpolated between evaluations",
        "ratio: a width's steps to the target over the full width's, seed by seed, mean [95% interval]; "
        "lower bound: some run never reached the target, its last step stands in",
        "source: fine-tuning epochs to converge, BERT-base, d_e 128 against 768: 5.2 / 3.0 = 1.73 (+73%)",
    ]
    return Table(
        name="width_convergence_cost",
        title="(b) Convergence cost: steps to one common target, as a ratio to the full width",
        rows=rows,
        notes=notes,
        digits={"d_e": 0, "steps to target": 0},
    )


# --------------------------------------------------------------------------- (c) parameters against loss


def parameters_table(numbers: Numbers, analysis: Analysis) -> Table:
    rows = []
    for study, levels, reference, widths, full in _ladders(numbers, analysis):
        full_params = next((n.params for n in reference.values() if n.params), None)
        for d_e, level in widths:
            params = next((n.params for n in levels[level].values() if n.params), None)
            saved = None if params is None or full_params is None else (full_params - params) / 1e6
            lost = (
                paired(levels, level, analysis.reference, "final_loss", None) if level != analysis.reference else None
            )
            source = source_width(d_e, full)
            rows.append(
                {
                    "study": study,
                    "d_e": d_e,
                    "share of hidden": share(d_e, full),
                    "params (M)": None if params is None else params / 1e6,
                    "saved (M)": saved,
                    "saved (%)": None if saved is None or not full_params else 100 * saved * 1e6 / full_params,
                    "loss lost (nats)": lost.format(3) if lost is not None else "reference",
                    "source": f"768 → {source} {SOURCE_SAVING[source]}" if source in SOURCE_SAVING else "",
                }
            )
    notes = [
        "saved: the full width's parameters minus this width's (the token, position and segment tables, "
        "the projection and the head's transform all scale with d_e); loss lost: this width's final "
        "validation loss minus the full width's, paired by seed, mean [95% interval]",
        "source: BERT-base, 768 → 384 saves about 12M parameters (11%) for about 0.6 accuracy points",
    ]
    return Table(
        name="width_parameters",
        title="(c) Parameters saved against loss lost, per width",
        rows=rows,
        notes=notes,
        digits={"d_e": 0, "params (M)": 3, "saved (M)": 3, "saved (%)": 1},
    )


# --------------------------------------------------------------------------- the control


def control_table(numbers: Numbers, analysis: Analysis) -> Table:
    """Tied minus untied final loss at each width both heads ran: the ladder's levels against the same
    d_e with ``output=untied`` (the control with the tied head's transform and its own output matrix)."""
    rows = []
    for study, levels in numbers.items():
        for d_e, level in ladder(levels, analysis.reference):
            control = level.replace("output=tied", "output=untied")
            if control == level or control not in levels:
                continue
            difference = paired(levels, level, control, "final_loss", None)
            rows.append(
                {"study": study, "d_e": d_e, "tied": level, "untied": control, "tied - untied": difference.format(3)}
            )
    notes = [
        "tied - untied: the tied head's final validation loss minus the control's, paired by seed, mean [95% "
        "interval]; the two heads share the transform (dense + GELU + LayerNorm + bias) and differ only in "
        "the output matrix (the token table, or one of the control's own); positive: tying costs",
    ]
    return Table(
        name="width_control",
        title="The control: tied minus untied at each width both ran",
        rows=rows,
        notes=notes,
        digits={"d_e": 0},
    )
