"""The evidence a pretraining study's claims are decided on, read from the runs' own CSV metrics:
the baselines each run logged, per level of the analysis axis the final losses and the (interpolated)
steps to ``unigram - t``, each level minus the reference seed by seed (a seed fixes the initialisation,
the data order and the masks, so two variants with one seed saw the same batches), the claims'
verdicts, the zero-shot probes, and every run's metrics and curve for anyone checking the tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiedemb.experiments.aggregate import SEED_LABEL, Interval, Table, pretraining_runs, sort_value, summarise
from tiedemb.experiments.claims import Analysis, Difference, claim_difference, comparisons, decide, steps_to_target
from tiedemb.experiments.runs import Run
from tiedemb.training.metric_names import (
    BIGRAM_LOSS,
    INIT_LOSS,
    INIT_LOSS_PREDICTED,
    PARAMS_TOTAL,
    STEP_TARGETS,
    UNIGRAM_LOSS,
    VAL_LOSS,
    VAL_OOD_LOSS,
    ZERO_SHOT,
    baseline_name,
    kept_name,
)

BASELINES = {
    "unigram": UNIGRAM_LOSS,
    "bigram": BIGRAM_LOSS,
    "ood unigram": baseline_name("unigram", ood=True),
    "ood bigram": baseline_name("bigram", ood=True),
}


@dataclass(frozen=True)
class RunNumbers:
    run: Run
    level: str
    seed: str
    final: float | None
    final_ood: float | None
    last_step: int | None
    baselines: dict[str, float | None]
    steps: dict[float, float | None]  # target -> interpolated step, None: never reached
    params: float | None = None  # parameters in all (params/total)
    tokenizer: str | None = None  # the fingerprint of the tokenizer the run read, where it logged one

    @property
    def below_unigram(self) -> float | None:
        unigram = self.baselines.get("unigram")
        return None if unigram is None or self.final is None else unigram - self.final


def axis_and_targets(analysis: Analysis | None) -> tuple[str, tuple[float, ...]]:
    if analysis is None:
        return "variant", STEP_TARGETS
    return analysis.axis, analysis.targets or STEP_TARGETS


def labels_of(runs: Iterable[Run]) -> list[str]:
    return list(dict.fromkeys(label for run in runs for label in run.labels))


def level_of(labels: dict[str, str], axis: str) -> str:
    """A run's level: its value on the analysis axis, then any other label but the seed
    (``32, head=untied``), so runs that differ in more than the axis are never pooled."""
    others = [f"{label}={value}" for label, value in labels.items() if label not in (axis, SEED_LABEL)]
    return ", ".join([labels.get(axis, ""), *others]) if others else labels.get(axis, "")


def run_numbers(run: Run, axis: str, targets: Iterable[float]) -> RunNumbers:
    baselines = {name: run.first(metric) for name, metric in BASELINES.items()}
    curve = run.series(VAL_LOSS)
    unigram = baselines["unigram"]
    steps = {target: (steps_to_target(curve, unigram - target) if unigram is not None else None) for target in targets}
    return RunNumbers(
        run=run,
        level=level_of(run.labels, axis),
        seed=run.labels.get(SEED_LABEL) or run.id,  # a run without a seed label pairs with none
        final=run.last(VAL_LOSS),
        final_ood=run.last(VAL_OOD_LOSS),
        last_step=curve[-1][0] if curve else None,
        baselines=baselines,
        steps=steps,
        params=run.first(PARAMS_TOTAL),
        tokenizer=run.tokenizer_fingerprint,
    )


def collect(runs: Iterable[Run], analysis: Analysis | None) -> dict[str, dict[str, dict[str, RunNumbers]]]:
    """study -> level -> seed -> numbers of the finished pretraining runs."""
    axis, targets = axis_and_targets(analysis)
    numbers: dict[str, dict[str, dict[str, RunNumbers]]] = {}
    for run in pretraining_runs(runs):
        found = run_numbers(run, axis, targets)
        numbers.setdefault(run.study, {}).setdefault(found.level, {})[found.seed] = found
    return numbers


def baselines_table(numbers: dict[str, dict[str, dict[str, RunNumbers]]]) -> Table:
    """Per study: the baselines its runs logged (the range where they differ)."""
    rows = []
    for study, levels in numbers.items():
        members = [found for seeds in levels.values() for found in seeds.values()]
        row: dict[str, Any] = {"study": study, "runs": len(members)}
        for name in BASELINES:
            values = [found.baselines[name] for found in members if found.baselines[name] is not None]
            if not values:
                row[name] = None
            elif max(values) - min(values) < 1e-9:
                row[name] = values[0]
            else:
                row[name] = f"{min(values):.3f}–{max(values):.3f}"
        rows.append(row)
    notes = [
        "add-one unigram and bigram models of the training blocks, scored on the runs' validation blocks "
        "(and masked positions) in nats per predicted token; ood: the out-of-domain validation text; each run "
        "logs them at its start (data/*_loss), `python main.py baselines --config ...` prints them",
    ]
    return Table(
        name="baselines",
        title="Baselines",
        rows=rows,
        notes=notes,
        digits={"runs": 0},
    )


def _mean(values: Iterable[float | None], scale: float = 1.0) -> float | None:
    """The mean of the values given, divided by ``scale``; ``None`` when there are none."""
    found = [value for value in values if value is not None]
    return sum(found) / len(found) / scale if found else None


def _steps(members: list[RunNumbers], target: float) -> str:
    """The runs' mean ± std steps to ``target``, over those that reached it, saying how many never did."""
    reached = [found.steps[target] for found in members if found.steps[target] is not None]
    stat = summarise(reached)
    never = len(members) - len(reached)
    if stat is None:
        return "never"
    return stat.format(0) + (f" ({never} of {len(members)} never)" if never else "")


def convergence_table(numbers: dict[str, dict[str, dict[str, RunNumbers]]], analysis: Analysis | None) -> Table:
    axis, targets = axis_and_targets(analysis)
    rows = []
    for study, levels in numbers.items():
        for level in sorted(levels, key=sort_value):
            members = list(levels[level].values())
            final = summarise(found.final for found in members)
            rows.append(
                {
                    "study": study,
                    axis: level,
                    "seeds": len(members),
                    "initial loss": summarise(found.run.first(INIT_LOSS) for found in members),
                    "predicted": summarise(found.run.first(INIT_LOSS_PREDICTED) for found in members),
                    "final val loss": final,
                    "95% CI": Interval(final) if final is not None else None,
                    "below unigram": summarise(found.below_unigram for found in members),
                    "final ood loss": summarise(found.final_ood for found in members),
                    **{f"steps to unigram - {target:g}": _steps(members, target) for target in targets},
                    "params (M)": _mean((found.params for found in members), 1e6),
                }
            )
    notes = [
        "mean ± sample standard deviation over seeds; 95% CI: of the mean final loss (Student's t)",
        "initial loss: the untrained model on the first training batch, without dropout; predicted: "
        "tiedemb.theory for the run's configuration",
        "below unigram: the in-domain unigram loss minus the final validation loss (positive: better than "
        "token frequencies)",
        "steps to unigram - t: the step at which the validation loss first reached the in-domain unigram loss "
        "minus t nats, interpolated linearly between the two evaluations around the crossing; averaged over "
        "the runs that reached it; never: the run ended above it",
        "params (M): parameters in all, mean over seeds",
    ]
    return Table(
        name="convergence",
        title="Convergence",
        rows=rows,
        notes=notes,
        digits={"seeds": 0, "params (M)": 3},
    )


def _one_tokenizer(mine: RunNumbers, theirs: RunNumbers) -> bool:
    """Whether two runs read one tokenizer: two tokenizers number the same words differently, so their
    losses are not paired measurements of one text. A run that logged no fingerprint (before runs
    recorded it) pairs with any."""
    return not (mine.tokenizer and theirs.tokenizer and mine.tokenizer != theirs.tokenizer)


def _seed_pairs(
    levels: Mapping[str, Mapping[str, RunNumbers]], level: str, reference: str
) -> list[tuple[str, RunNumbers, RunNumbers]]:
    """The seeds both levels ran, each with its two runs (level's, reference's)."""
    mine, theirs = levels.get(level, {}), levels.get(reference, {})
    return [(seed, mine[seed], theirs[seed]) for seed in sorted(set(mine) & set(theirs), key=sort_value)]


def paired_seeds(levels: Mapping[str, Mapping[str, RunNumbers]], level: str, reference: str) -> list[str]:
    """The seeds both levels ran whose two runs read one tokenizer."""
    return [seed for seed, mine, theirs in _seed_pairs(levels, level, reference) if _one_tokenizer(mine, theirs)]


def refused_pairs(levels: Mapping[str, Mapping[str, RunNumbers]], level: str, reference: str) -> list[tuple[str, str]]:
    """The run pairs (level's, reference's) of the seeds both ran whose tokenizers differ."""
    pairs = _seed_pairs(levels, level, reference)
    return [(mine.run.id, theirs.run.id) for _, mine, theirs in pairs if not _one_tokenizer(mine, theirs)]


def refusal_note(refused: Iterable[tuple[str, str]]) -> str | None:
    pairs = sorted(set(refused))
    if not pairs:
        return None
    named = "; ".join(f"{first} with {second}" for first, second in pairs)
    return f"left out, their tokenizer fingerprints differ (tokenizer_fingerprint in hparams.yaml): {named}"


def paired(
    levels: dict[str, dict[str, RunNumbers]], level: str, reference: str, metric: str, target: float | None
) -> Difference:
    """``level - reference`` over shared seeds whose runs read one tokenizer (``claims.claim_difference``)."""
    seeds = paired_seeds(levels, level, reference)
    return claim_difference(
        {seed: levels[level][seed] for seed in seeds}, {seed: levels[reference][seed] for seed in seeds}, metric, target
    )


def differences_table(numbers: dict[str, dict[str, dict[str, RunNumbers]]], analysis: Analysis | None) -> Table:
    axis, targets = axis_and_targets(analysis)
    reference = analysis.reference if analysis else None
    rows, refused = [], []
    for study, levels in numbers.items():
        # the analysis's reference, or, in a study without it, the reference its claims name
        claimed = [claim.reference for claim in (analysis.claims if analysis else ()) if claim.study == study]
        ref = next((name for name in (reference, *claimed) if name in levels), None)
        if ref is None:
            continue
        for level in sorted(levels, key=sort_value):
            if level == ref:
                continue
            refused += refused_pairs(levels, level, ref)
            rows.append(
                {
                    "study": study,
                    axis: level,
                    "reference": ref,
                    "Δ final val loss": paired(levels, level, ref, "final_loss", None).format(3),
                    **{
                        f"Δ steps to unigram - {target:g}": paired(levels, level, ref, "steps", target).format(0)
                        for target in targets
                    },
                }
            )
    notes = [
        f"each level minus its study's reference ({reference}, or the reference the study's claims name), "
        "seed by seed: mean [95% interval, Student's t on the "
        "paired differences] (n = seeds both ran)",
        "lower bound: a run of the level never reached the target, so its step count is taken as its last "
        "step and the difference is at least this; no paired seeds: none ran both, or the reference never "
        "reached the target",
    ]
    notes += [note] if (note := refusal_note(refused)) else []
    return Table(
        name="paired_differences",
        title="Paired differences from the reference",
        rows=rows,
        notes=notes,
    )


def claims_table(numbers: dict[str, dict[str, dict[str, RunNumbers]]], analysis: Analysis | None) -> Table:
    compared, refused = [], []
    for claim, level, reference in comparisons(analysis):
        levels = numbers.get(claim.study, {})
        compared.append((claim, level, reference, paired(levels, level, reference, claim.metric, claim.target)))
        refused += refused_pairs(levels, level, reference)
    rows = decide(compared)
    for row, (claim, level, reference, _) in zip(rows, compared):
        row["study"] = claim.study
        missing = [name for name in (level, reference) if name not in numbers.get(claim.study, {})]
        if missing:
            row["verdict"] = row["Holm verdict"] = f"not run ({missing[0]} has no finished runs)"
    notes = [
        "difference: level minus reference, paired by seed, mean [95% interval]; the claims, margins and "
        "rules (tiedemb/experiments/claims.py) were fixed in the sweep file's analysis section before the runs",
        "p: the one-sided paired t-test of what the claim asserts; Holm: adjusted over all the claims "
        "(family-wise 0.025)",
    ]
    notes += [note] if (note := refusal_note(refused)) else []
    columns = ["claim", "study", "level", "reference", "measure", "expected", "margin", "difference", "verdict"]
    return Table(
        name="claims",
        title="Claims and verdicts",
        rows=rows,
        columns=[*columns, "p", "Holm p", "Holm verdict"],
        notes=notes,
    )


def run_metrics_table(runs: Iterable[Run], analysis: Analysis | None) -> Table:
    runs = list(runs)
    axis, targets = axis_and_targets(analysis)
    label_names = labels_of(runs)
    step_columns = [f"steps to unigram - {target:g}" for target in targets]
    rows = []
    for run in runs:
        found = run_numbers(run, axis, targets)
        seed, data_seed, corpus_seed = seeds_of(run)
        rows.append(
            {
                "run": run.id,
                "study": run.study,
                **{name: run.labels.get(name) for name in label_names},
                "state": run.state,
                "seed_everything": seed,
                "data seed": data_seed,
                "corpus seed": corpus_seed,
                "tokenizer": run.tokenizer_fingerprint,
                "initial loss": run.first(INIT_LOSS),
                "predicted": run.first(INIT_LOSS_PREDICTED),
                "last step": found.last_step,
                "final val loss": found.final,
                "final ood loss": found.final_ood,
                **{name: found.baselines[name] for name in BASELINES},
                **{column: found.steps[target] for target, column in zip(targets, step_columns)},
                "params": run.first(PARAMS_TOTAL),
                "commit": run.commit,
                "started": run.started,
            }
        )
    return Table(
        name="run_metrics",
        title="Every run's final metrics",
        rows=rows,
        notes=[
            "tokenizer: the fingerprint of the tokenizer the run read, as it logged it (blank: a run from "
            "before runs logged it); runs of different fingerprints are never paired"
        ],
        digits={"last step": 0, "params": 0, **dict.fromkeys(step_columns, 1)},
    )


def curve_rows(runs: Iterable[Run]) -> tuple[list[str], list[list[Any]]]:
    runs = list(runs)
    label_names = labels_of(runs)
    columns = ["run", "study", *label_names, "step", VAL_LOSS, VAL_OOD_LOSS]
    rows = []
    for run in runs:
        val, ood = run.metrics.get(VAL_LOSS, {}), run.metrics.get(VAL_OOD_LOSS, {})
        for step in sorted(set(val) | set(ood)):
            rows.append(
                [
                    run.id,
                    run.study,
                    *(run.labels.get(name, "") for name in label_names),
                    step,
                    val.get(step),
                    ood.get(step),
                ]
            )
    return columns, rows


def seeds_of(run: Run) -> tuple[Any, Any, Any]:
    """The run's ``seed_everything``, ``data.seed`` and ``data.corpus_seed``, as it recorded them."""
    data = (run.config.get("data") or {}).get("init_args") or {}
    return (
        run.config.get("seed_everything"),
        run.hparams.get("seed", data.get("seed")),
        run.hparams.get("corpus_seed", data.get("corpus_seed")),
    )


PAIRED_DIFFERENCE = "Δ vs full width"
PAIRED_INTERVAL = "95% paired bootstrap"


def _scores_file(run: Run) -> Path | None:
    from tiedemb.modules.similarity import SCORES_FILE  # torch: only where a probe is read

    return next(iter(sorted(run.folder.rglob(SCORES_FILE))), None)


def _full_width_probes(probes: list[Run]) -> dict[str, Run]:
    """Per study, its one probe of the encoder as it is (no narrowing recorded) that wrote its pairs' scores."""
    found: dict[str, list[Run]] = {}
    for run in probes:
        if run.first(kept_name("token")) is None and _scores_file(run) is not None:
            found.setdefault(run.study, []).append(run)
    return {study: runs[0] for study, runs in found.items() if len(runs) == 1}


def _paired_with(run: Run, reference: Run | None) -> dict[str, Any]:
    empty = {PAIRED_DIFFERENCE: None, PAIRED_INTERVAL: ""}
    if reference is None or reference is run:
        return empty
    mine, theirs = _scores_file(run), _scores_file(reference)
    if mine is None or theirs is None:
        return empty
    import torch

    from tiedemb.modules.similarity import paired_auroc_difference, read_scores

    (scores, labels), (reference_scores, reference_labels) = read_scores(mine), read_scores(theirs)
    if not torch.equal(labels, reference_labels):  # not the same pairs: nothing to pair
        return empty
    paired = paired_auroc_difference(scores, reference_scores, labels)
    return {PAIRED_DIFFERENCE: paired.difference, PAIRED_INTERVAL: f"[{paired.low:+.3f}, {paired.high:+.3f}]"}


def zero_shot_table(runs: Iterable[Run]) -> Table:
    rows = []
    probes = [run for run in runs if run.ok and f"{ZERO_SHOT}/auroc" in run.metrics]
    label_names = labels_of(probes)
    references = _full_width_probes(probes)
    for run in sorted(probes, key=lambda run: [run.study, *(sort_value(run.labels.get(n, "")) for n in label_names)]):
        rows.append(
            {
                "study": run.study,
                **{name: run.labels.get(name) for name in label_names},
                "ROC-AUC": run.first(f"{ZERO_SHOT}/auroc"),
                "95% bootstrap": "[{:.3f}, {:.3f}]".format(
                    run.first(f"{ZERO_SHOT}/auroc_low"), run.first(f"{ZERO_SHOT}/auroc_high")
                ),
                "pairs": run.first(f"{ZERO_SHOT}/examples"),
                **_paired_with(run, references.get(run.study)),
                **{f"kept {name}": run.first(kept_name(name)) for name in ("token", "position", "segment")},
            }
        )
    notes = [
        "ROC-AUC of the cosine similarity of each pair's mean-pooled sentence vectors against the gold label, "
        "no training (0.5: chance); the interval resamples the dev pairs (1000 bootstrap samples)",
        "Δ vs full width: this probe's ROC-AUC minus that of the study's one probe of the encoder as it is (not "
        "narrowed), on the same pairs; the 95% paired bootstrap scores both on each resample of the pairs, so "
        "the pairs' shared difficulty cancels (blank: no such probe, or its pair scores were not written)",
        "kept: the share of each embedding table's energy the narrowing to d_e kept (blank: not narrowed)",
    ]
    return Table(
        name="zero_shot",
        title="Zero-shot sentence similarity",
        rows=rows,
        notes=notes,
        digits={"pairs": 0},
    )
