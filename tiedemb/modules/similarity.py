"""Zero-shot sentence similarity: how well a pretrained encoder separates paraphrases with no training.

Each sentence of a pair is encoded on its own, its last hidden states averaged over its tokens
(the pooling sentence encoders such as all-MiniLM-L6-v2 are trained with), and the pair scored by
the cosine of the two averages. The area under the ROC curve of that score against the gold label
says how well the encoder ranks paraphrases above non-paraphrases (0.5: chance), with a 95%
bootstrap interval over the examples. Nothing is fitted, so no seed noise enters: the interval is
the dev set's sampling noise alone, which makes it a probe of an embedding (narrowed, re-adapted)
that fine-tuned accuracy on a 408-example dev set cannot resolve.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torchmetrics.functional.classification import binary_auroc

BOOTSTRAP_SAMPLES = 1000
BATCH_SIZE = 64


@dataclass(frozen=True)
class SimilarityScore:
    auroc: float
    low: float  # 95% bootstrap interval
    high: float
    examples: int

    def metrics(self, prefix: str = "zero_shot") -> dict[str, float]:
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


def bootstrap_auroc(scores: Tensor, labels: Tensor, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> SimilarityScore:
    """AUROC of ``scores`` against binary ``labels`` and its 95% percentile bootstrap interval."""
    labels = labels.long()
    auroc = float(binary_auroc(scores, labels))
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    for _ in range(samples):
        index = torch.randint(len(scores), (len(scores),), generator=generator)
        if labels[index].min() == labels[index].max():  # one class only: no ranking to score
            continue
        drawn.append(float(binary_auroc(scores[index], labels[index])))
    values = torch.tensor(drawn, dtype=torch.float64)
    low, high = (
        torch.quantile(values, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
        if len(drawn)
        else (float("nan"), float("nan"))
    )
    return SimilarityScore(auroc, low, high, len(scores))


def pair_similarity(encode, tokenizer, first: list[str], second: list[str], max_length: int) -> Tensor:
    """Cosine similarity of each pair's mean-pooled sentence vectors."""
    a = mean_pooled(encode, tokenizer, first, max_length)
    b = mean_pooled(encode, tokenizer, second, max_length)
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)
