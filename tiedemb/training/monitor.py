"""What the studies are about, watched during training (docs/dashboard.md); every run's parameter counts."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from jsonargparse.typing import PositiveInt
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn

from tiedemb.nn.layers import IGNORE_INDEX  # the labels of positions that predict nothing (unmasked MLM)
from tiedemb.training import metric_names as names


def effective_rank(matrix: Tensor) -> float:
    singular = torch.linalg.svdvals(matrix.detach().double())
    total = singular.sum()
    if total <= 0:
        return 0.0
    p = singular[singular > 0] / total
    return float(torch.exp(-(p * p.log()).sum()))


def gradient_norms(network: nn.Module) -> dict[str, float]:
    """The total gradient norm and one per part (``embedding``, ``encoder``, anything else: ``head``)."""
    squares: dict[str, list[Tensor]] = {part: [] for part in names.GRAD_NORM_PARTS}
    for name, parameter in network.named_parameters():  # a shared parameter is yielded once
        if parameter.grad is None:
            continue
        part = name.split(".", 1)[0]
        part = part if part in ("embedding", "encoder") else "head"
        squares[part].append(parameter.grad.detach().float().pow(2).sum())
    # summed on the device, read once per part: one synchronisation each, not one per parameter
    sums = {part: float(torch.stack(found).sum()) if found else 0.0 for part, found in squares.items()}
    parts = {names.grad_norm_name(part): value**0.5 for part, value in sums.items()}
    return {names.GRAD_NORM_TOTAL: sum(sums.values()) ** 0.5, **parts}


def row_norms(table: Tensor) -> dict[str, float]:
    norms = table.detach().float().norm(dim=1)
    return {names.ROW_NORM_MEAN: float(norms.mean()), names.ROW_NORM_STD: float(norms.std())}


@torch.no_grad()
def self_logit_margin(network: nn.Module, probe: dict[str, Tensor]) -> float | None:
    """Mean over the probe's positions of logit(own token) - logsumexp(other logits); None with no position."""
    ids, mask = probe["input_ids"], probe.get("attention_mask")
    was_training = network.training
    network.eval()
    try:
        logits = network.head(network.encode(ids, mask, probe.get("token_type_ids"))).float()
    finally:
        network.train(was_training)
    own = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    others = torch.logsumexp(logits.scatter(-1, ids.unsqueeze(-1), float("-inf")), dim=-1)
    keep = mask.bool() if mask is not None else torch.ones_like(ids, dtype=torch.bool)
    if not keep.any():
        return None
    return float((own - others)[keep].mean())


def probe_from(batch: Any, sequences: int, length: int) -> dict[str, Tensor] | None:
    """The first ``sequences`` x ``length`` tokens of a language-model batch, with masked MLM positions restored."""
    if not isinstance(batch, dict) or not isinstance(batch.get("input_ids"), Tensor):
        return None
    ids = batch["input_ids"][:sequences, :length]
    labels = batch.get("labels")
    if isinstance(labels, Tensor) and labels.shape == batch["input_ids"].shape:
        # An MLM batch holds [MASK] (or a random token) where it predicts: the margin is of the text itself.
        labels = labels[:sequences, :length]
        ids = torch.where(labels != IGNORE_INDEX, labels, ids)
    probe = {"input_ids": ids.detach().clone()}
    for key in ("attention_mask", "token_type_ids"):
        if isinstance(batch.get(key), Tensor):
            probe[key] = batch[key][:sequences, :length].detach().clone()
    return probe


class TrainingMonitor(Callback):
    """Gradient norms, token-table statistics and the self-logit margin; the table's effective rank."""

    def __init__(
        self, every_n_steps: PositiveInt | None = None, probe_sequences: int = 8, probe_length: int = 128
    ) -> None:
        """
        Args:
            every_n_steps: optimiser steps between two records (default: ``trainer.log_every_n_steps``).
            probe_sequences: sequences in the probe batch the self-logit margin is measured on (the
                first validation batch's, else the first training batch's).
            probe_length: tokens of each probe sequence.
        """
        self.every_n_steps = every_n_steps
        self.probe_sequences = probe_sequences
        self.probe_length = probe_length
        self._probe: dict[str, Tensor] | None = None

    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self._probe is None and batch_idx == 0 and dataloader_idx == 0:
            self._probe = probe_from(batch, self.probe_sequences, self.probe_length)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._probe is None:  # no validation before the first step (num_sanity_val_steps=0)
            self._probe = probe_from(batch, self.probe_sequences, self.probe_length)

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        every = self.every_n_steps or trainer.log_every_n_steps or 1
        if trainer.global_step % every or not trainer.loggers or not trainer.is_global_zero:
            return
        network = _network(pl_module)
        metrics = gradient_norms(network)
        table = _token_table(network)
        if table is not None:
            metrics.update(row_norms(table))
            if self._probe is not None and isinstance(getattr(network, "head", None), nn.Module):
                probe = {key: value.to(table.device) for key, value in self._probe.items()}
                margin = self_logit_margin(network, probe)
                if margin is not None:
                    metrics[names.SELF_LOGIT_MARGIN] = margin
        _log(trainer, metrics)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.loggers or not trainer.is_global_zero or trainer.state.fn != "fit":
            return
        table = _token_table(_network(pl_module))
        if table is not None:
            _log(trainer, {names.EFFECTIVE_RANK: effective_rank(table)})


def _network(pl_module: L.LightningModule) -> nn.Module:
    network = getattr(pl_module, "model", None)
    return network if isinstance(network, nn.Module) else pl_module


def _token_table(network: nn.Module) -> Tensor | None:
    """The token table, where it is whole on this process (a sharding strategy may hold a slice)."""
    token = getattr(getattr(network, "embedding", None), "token", None)
    weight = getattr(token, "weight", None)
    if not isinstance(weight, Tensor) or weight.dim() != 2 or weight.shape[0] != getattr(token, "num_embeddings", -1):
        return None
    return weight


def _log(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    # Straight to the loggers at this step: Lightning's own cadence (log_every_n_steps counted from
    # another origin) would drop records off its grid.
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


def parameter_counts(model: nn.Module) -> dict[str, float]:
    """``params/total``, ``params/embedding`` (the submodule named ``embedding``) and ``params/non_embedding``;
    a shared parameter counts once."""
    total = sum(parameter.numel() for parameter in model.parameters())
    embedding = next((module for name, module in model.named_modules() if name.rsplit(".", 1)[-1] == "embedding"), None)
    in_embedding = sum(parameter.numel() for parameter in embedding.parameters()) if embedding is not None else 0
    return {
        names.PARAMS_TOTAL: float(total),
        names.PARAMS_EMBEDDING: float(in_embedding),
        "params/non_embedding": float(total - in_embedding),
    }


class ParameterCounts(Callback):
    """Logs ``parameter_counts`` of the trained module at the start of fit and of test."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _log(trainer, parameter_counts(pl_module))

    on_test_start = on_train_start
