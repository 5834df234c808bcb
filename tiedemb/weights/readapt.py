"""Re-adapting a narrowed embedding to the full-width one it replaces, on unlabelled text.

Narrowing (``tiedemb.weights.narrow``) fits every row of the tables into one shared basis, each
row counting alike, so a token the text never uses weighs as much as ``the``. What the encoder
sees, though, is the embedding's output at the tokens, positions and segments that text really
has. Re-adaptation fits the narrow tables and their projection, for a few hundred steps, so that
the narrow embedding's output matches the full-width embedding's output there:

    minimise  mean over real (non-padding) positions of  ||narrow(x) - full(x)||² / hidden

starting from the narrowing's own fit. Everything after the projection (the embedding norm, the
encoder) is the pretrained model's and stays fixed, and no label is read: the text is only the
input side of a task's training examples. Both embeddings run in eval mode, so dropout does not
enter the target.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

MEASURED_BATCHES = 8
"""Batches the error is measured on before and after fitting (the first ones the text gives)."""


@dataclass(frozen=True)
class Readaptation:
    """The mean squared error of the narrow embedding's output against the full one's."""

    steps: int
    error_before: float
    error_after: float

    def metrics(self) -> dict[str, float]:
        return {"narrow/readapt_mse_before": self.error_before, "narrow/readapt_mse_after": self.error_after}


def _inputs(batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor | None, Tensor]:
    input_ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    real = torch.ones_like(input_ids, dtype=torch.bool) if mask is None else mask.bool()
    return input_ids, batch.get("token_type_ids"), real


def _error(narrow: nn.Module, full: nn.Module, batch: Mapping[str, Tensor]) -> Tensor:
    input_ids, token_type_ids, real = _inputs(batch)
    with torch.no_grad():
        target = full(input_ids, token_type_ids)
    output = narrow(input_ids, token_type_ids)
    return (output - target)[real].pow(2).mean()


def readapt_embedding(
    narrow: nn.Module,
    full: nn.Module,
    batches: Iterable[Mapping[str, Tensor]],
    steps: int,
    learning_rate: float = 1e-3,
    trainable: Iterable[nn.Parameter] | None = None,
) -> Readaptation:
    """Fit ``narrow``'s tables and projection to ``full``'s output on ``batches`` (cycled).

    Args:
        narrow: the narrowed embedding, called as ``narrow(input_ids, token_type_ids)``.
        full: the full-width embedding it replaces, same call, never changed.
        batches: dicts with ``input_ids`` and optionally ``attention_mask`` and ``token_type_ids``;
            labels, if present, are not read. Cycled until ``steps`` updates are made.
        steps: Adam updates.
        learning_rate: Adam's step size.
        trainable: the parameters to fit; default every parameter of ``narrow`` except its norm's
            (the tables and the projection).
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if trainable is None:
        norm = getattr(narrow, "norm", None)
        frozen = {id(p) for p in norm.parameters()} if isinstance(norm, nn.Module) else set()
        trainable = [p for p in narrow.parameters() if id(p) not in frozen]
    parameters = list(trainable)
    was_training = narrow.training, full.training
    narrow.eval()
    full.eval()
    stream = iter(batches)
    measured = list(itertools.islice(stream, MEASURED_BATCHES))
    if not measured:
        raise ValueError("no batches to re-adapt the embedding on")

    def mean_error() -> float:
        with torch.no_grad():
            return float(torch.stack([_error(narrow, full, batch) for batch in measured]).mean())

    before = mean_error()
    # Only the fitted parameters take gradients; the rest of the narrow embedding (its norm) is fixed.
    fitted = {id(p) for p in parameters}
    every = list(narrow.parameters())
    flags = [p.requires_grad for p in every]
    for parameter in every:
        parameter.requires_grad_(id(parameter) in fitted)
    optimizer = torch.optim.Adam(parameters, lr=learning_rate)
    with torch.enable_grad():
        for batch in itertools.islice(itertools.cycle(itertools.chain(measured, stream)), steps):
            optimizer.zero_grad(set_to_none=True)
            _error(narrow, full, batch).backward()
            optimizer.step()
    for parameter, flag in zip(every, flags):
        parameter.requires_grad_(flag)
        parameter.grad = None
    after = mean_error()
    narrow.train(was_training[0])
    full.train(was_training[1])
    return Readaptation(steps=steps, error_before=before, error_after=after)
