"""One architecture audited: built, measured, predicted, judged, and with ``remedies`` remedied."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiedemb.theory import Prediction
from tiedemb.weights.audit.architecture import Architecture, describe_model, predict
from tiedemb.weights.audit.build import DEFAULT_MAX_PARAMETERS, build_model, check_size, make_config
from tiedemb.weights.audit.measure import measure
from tiedemb.weights.audit.remedies import RemedyResult, apply_remedies
from tiedemb.weights.audit.tokens import make_batch

SMALL_RATIO = 0.25
"""Up to this branches-to-embedding ratio the network counts as near-identity: the token's share of
the normalised stream is then at least 1/sqrt(1 + 0.25^2) = 97% of what the theory assumes."""
FAR_ABOVE = 1.0
"""Nats above ln n from which a start counts as far above it."""
COPYING = 0.5
"""The share of positions whose top prediction is the token read there, from which the model copies."""


@dataclass
class Audit:
    arch: Architecture
    tokens: str  # the batch, in words
    predicted: Prediction  # the theory's, near identity
    predicted_with_branches: Prediction  # the measured branches counted as noise
    measured: float
    copy_rate: float
    branch_ratio: float
    remedies: list[RemedyResult] = field(default_factory=list)

    @property
    def log_n(self) -> float:
        return math.log(self.arch.vocab_size)

    @property
    def near_identity(self) -> bool:
        return self.branch_ratio <= SMALL_RATIO

    @property
    def two_gram(self) -> bool:
        return self.measured - self.log_n >= FAR_ABOVE and self.copy_rate >= COPYING


def audit(
    *,
    model_type: str | None = None,
    source: Path | None = None,
    overrides: dict[str, Any] | None = None,
    batch_size: int = 4,
    seq_len: int = 64,
    seed: int = 0,
    text: Path | None = None,
    tokenizer: str | None = None,
    remedies: bool = False,
    max_parameters: int = DEFAULT_MAX_PARAMETERS,
) -> Audit:
    config, family = make_config(model_type, source, overrides or {})
    check_size(config, max_parameters)
    model = build_model(config, family, seed)
    arch = describe_model(model, config, family)
    batch = make_batch(config, family.objective, (batch_size, seq_len), seed, text, tokenizer)
    base = measure(model, family, batch)
    rate = batch.repeat_rate
    result = Audit(
        arch=arch,
        tokens=batch.described,
        predicted=predict(arch, repeat_rate=rate),
        predicted_with_branches=predict(arch, repeat_rate=rate, branch_ratio=base.branch_ratio),
        measured=base.loss,
        copy_rate=base.copy_rate,
        branch_ratio=base.branch_ratio,
    )
    if remedies:
        result.remedies = apply_remedies(model, arch, batch, base, seed)
    return result
