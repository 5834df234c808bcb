"""Zero-shot sentence similarity: how well a pretrained encoder separates paraphrases with no training.

Each sentence is mean-pooled on its own (as all-MiniLM-L6-v2 is trained), each pair scored by the
cosine of its two vectors, and the ROC-AUC of that score given with a 95% bootstrap interval: with
nothing fitted, the dev set's sampling noise alone, a finer probe than fine-tuned accuracy.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torchmetrics.functional.classification import binary_auroc

from tiedemb.training.files import atomic_write_text
from tiedemb.training.metric_names import ZERO_SHOT

BOOTSTRAP_SAMPLES = 1000
BATCH_SIZE = 64
SCORES_FILE = "zero_shot_scores.csv"  # each pair's score and label: what a paired comparison resamples


@dataclass(frozen=True)
class SimilarityScore:
    auroc: float
    low: float  # 95% bootstrap interval
    high: float
    examples: int

    def metrics(self, prefix: str = ZERO_SHOT) -> dict[str, float]:
        return {
            f"{prefix}/auroc": self.auroc,
            f"{prefix}/auroc_low": self.low,
            f"{prefix}/auroc_high": self.high,
            f"{prefix}/examples": float(self.examples),
        }


@torch.no_grad()
def mean_pooled(encode, tokenizer, sentences: list[str], max_length: int) -> Tensor:
    """(N, hidden) averages of ``encode``'s last hidden states over each sentence's tokens."""
    pooled = []
    for start in range(0, len(sentences), BATCH_SIZE):
        batch = tokenizer(
            sentences[start : start + BATCH_SIZE],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
            return_token_type_ids=True,
        )
        hidden = encode(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled.append((hidden * mask).sum(1) / mask.sum(1).clamp(min=1))
    return torch.cat(pooled)


def _percentile_interval(statistic, labels: Tensor, samples: int, seed: int) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of ``statistic(index)`` over resamples of the pairs;
    a resample holding one class only (no ranking to score) is skipped."""
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    for _ in range(samples):
        index = torch.randint(len(labels), (len(labels),), generator=generator)
        if labels[index].min() == labels[index].max():
            continue
        drawn.append(statistic(index))
    if not drawn:
        return float("nan"), float("nan")
    values = torch.tensor(drawn, dtype=torch.float64)
    low, high = torch.quantile(values, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return low, high


def bootstrap_auroc(scores: Tensor, labels: Tensor, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> SimilarityScore:
    """AUROC of ``scores`` against binary ``labels`` and its 95% percentile bootstrap interval."""
    labels = labels.long()
    low, high = _percentile_interval(lambda i: float(binary_auroc(scores[i], labels[i])), labels, samples, seed)
    return SimilarityScore(float(binary_auroc(scores, labels)), low, high, len(scores))


@dataclass(frozen=True)
class PairedDifference:
    difference: float  # AUROC of the scores minus that of the reference, on the same pairs
    low: float  # 95% paired bootstrap interval
    high: float


def paired_auroc_difference(
    scores: Tensor, reference: Tensor, labels: Tensor, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> PairedDifference:
    """AUROC(scores) - AUROC(reference) over the same pairs, with a 95% paired bootstrap interval.

    Each resample scores both probes on the same pairs, so which pairs are easy cancels in the
    difference: its interval is narrower than either probe's own when their scores are correlated.
    """
    if not (len(scores) == len(reference) == len(labels)):
        raise ValueError(f"paired scores need the same pairs: {len(scores)}, {len(reference)} and {len(labels)} rows")
    labels = labels.long()

    def difference(index: Tensor | slice) -> float:  # both probes on the same pairs
        return float(binary_auroc(scores[index], labels[index]) - binary_auroc(reference[index], labels[index]))

    return PairedDifference(difference(slice(None)), *_percentile_interval(difference, labels, samples, seed))


def write_scores(folder: str | Path, scores: Tensor, labels: Tensor) -> Path:
    """``zero_shot_scores.csv`` in ``folder``: one row per pair (its index in the split, gold label, score)."""
    pairs = enumerate(zip(labels.tolist(), scores.tolist()))
    rows = [f"{index},{int(label)},{float(score)!r}" for index, (label, score) in pairs]
    path = Path(folder) / SCORES_FILE
    atomic_write_text(path, "\n".join(["pair,label,score", *rows]) + "\n")
    return path


def read_scores(path: str | Path) -> tuple[Tensor, Tensor]:
    """(scores, labels) as ``write_scores`` wrote them, in pair order."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = sorted(csv.DictReader(handle), key=lambda row: int(row["pair"]))
    scores = torch.tensor([float(row["score"]) for row in rows], dtype=torch.float64)
    labels = torch.tensor([int(row["label"]) for row in rows])
    return scores, labels


def pair_similarity(encode, tokenizer, first: list[str], second: list[str], max_length: int) -> Tensor:
    """Cosine similarity of each pair's mean-pooled sentence vectors."""
    a = mean_pooled(encode, tokenizer, first, max_length)
    b = mean_pooled(encode, tokenizer, second, max_length)
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)
