"""Which dev metrics each GLUE task reports, how they are named, and epochs to converge.

GLUE's names: ``val/accuracy`` and ``val/f1`` (positive class) for MRPC; a split's suffix comes from
its name (``validation_matched`` -> ``val/accuracy_matched``), so several dev splits need no code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torchmetrics import Metric
from torchmetrics.classification import BinaryF1Score, MulticlassAccuracy, MulticlassMatthewsCorrCoef

from tiedemb.training.metric_names import MAJORITY_PREFIX

#: Metrics per task, the main one first (it decides convergence and should decide checkpoints).
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"),
    "cola": ("matthews",),
}
DEFAULT_METRICS = ("accuracy",)
CONVERGED_FRACTION = 0.99
"""A run has converged once the main dev metric reaches this fraction of its best value."""


def metric_names(task: str | None) -> tuple[str, ...]:
    return TASK_METRICS.get(task or "", DEFAULT_METRICS)


#: Each metric, from predicted and true class ids; f1 is the positive class's, for binary tasks.
METRICS: dict[str, Callable[[int], Metric]] = {
    "accuracy": lambda num_labels: MulticlassAccuracy(num_classes=num_labels, average="micro"),
    "f1": lambda num_labels: BinaryF1Score(),
    "matthews": lambda num_labels: MulticlassMatthewsCorrCoef(num_classes=num_labels),
}


def build_metric(name: str, num_labels: int) -> Metric:
    return METRICS[name](num_labels)


def majority_scores(
    task: str | None, num_labels: int, train_labels: Sequence[int], dev_labels: dict[str, Sequence[int]]
) -> dict[str, float]:
    """Each dev metric of always answering the most frequent training label (ties: the lowest id), the
    floor a fine-tuned score is read against; ``dev_labels`` maps a dev split's name to its labels."""
    counts = torch.bincount(torch.as_tensor(list(train_labels), dtype=torch.long), minlength=num_labels)
    majority = int(torch.argmax(counts))
    scores = {}
    for split, labels in dev_labels.items():
        target = torch.as_tensor(list(labels), dtype=torch.long)
        for name in metric_names(task):
            metric = build_metric(name, num_labels)
            metric.update(torch.full_like(target, majority), target)
            scores[f"{MAJORITY_PREFIX}{name}{split_suffix(split)}"] = float(metric.compute())
    return scores


def split_suffix(split: str) -> str:
    """``validation`` -> ``""``, ``validation_matched`` -> ``"_matched"``."""
    return split.removeprefix("validation")


def epochs_to_converge(history: Sequence[tuple[float, float]], fraction: float = CONVERGED_FRACTION) -> float | None:
    """The first (fractional) epoch whose metric reaches ``fraction`` of the run's best.

    ``history`` is (epoch, value) in training order. A best value <= 0 (e.g. a Matthews
    correlation that never rose) has no meaningful fraction, so the epoch of the best counts.
    """
    if not history:
        return None
    best = max(value for _, value in history)
    target = fraction * best if best > 0 else best
    return next(epoch for epoch, value in history if value >= target)
