"""Which dev metrics each GLUE task reports, how they are named, and epochs to converge.

Names follow GLUE's conventions: ``val/accuracy`` and ``val/f1`` (positive class) for MRPC,
``val/accuracy_matched`` / ``val/accuracy_mismatched`` for MNLI. The suffix comes from the split
name (``validation_matched`` -> ``_matched``), so a task with several dev splits needs no code.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric
from torchmetrics.classification import BinaryF1Score, MulticlassAccuracy, MulticlassMatthewsCorrCoef

from tiedemb.errors import UserError
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


def build_metric(name: str, num_labels: int) -> Metric:
    """A fresh torchmetrics object that takes predicted class ids and true class ids."""
    if name == "accuracy":
        return MulticlassAccuracy(num_classes=num_labels, average="micro")
    if name == "f1":
        if num_labels != 2:
            raise UserError(
                f"the f1 metric is the positive class's F1 of a binary task; this one has {num_labels} labels"
            )
        return BinaryF1Score()
    if name == "matthews":
        return MulticlassMatthewsCorrCoef(num_classes=num_labels)
    raise ValueError(f"unknown metric {name!r}")


def majority_scores(
    task: str | None, num_labels: int, train_labels: Sequence[int], dev_labels: dict[str, Sequence[int]]
) -> dict[str, float]:
    """Each dev metric of the classifier that always answers the most frequent training label.

    The floor a fine-tuned score is read against: on MRPC, for instance, answering "paraphrase"
    every time already scores about two thirds accuracy and an F1 above 80. ``dev_labels`` maps a
    validation split's name to its labels. A tie between labels goes to the lowest id.
    """
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
