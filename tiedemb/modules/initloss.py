"""Measure each head variant's initial loss on real batches and set it beside the theory."""

from __future__ import annotations

from itertools import islice
from typing import Any

import lightning as L
import torch

from tiedemb.errors import UserError
from tiedemb.nn import HEADS
from tiedemb.nn.config import HEAD_ONLY_SETTINGS, TransformerConfig
from tiedemb.theory import predict_for_config


def first_batches(datamodule: L.LightningDataModule, count: int) -> list[dict]:
    datamodule.prepare_data()
    datamodule.setup("validate")
    batches = list(islice(iter(datamodule.val_dataloader()), count))
    if not batches:
        raise UserError("the validation data is empty; nothing to measure the initial loss on")
    return batches


@torch.no_grad()
def mean_loss(model: torch.nn.Module, batches: list[dict]) -> float:
    """Per-token mean loss over ``batches`` (weighted by each batch's number of targets)."""
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        output = model(**batch)
        total += output.loss.item() * output.num_targets
        count += output.num_targets
    return total / max(count, 1)


def measure_initial_losses(
    model: L.LightningModule,
    datamodule: L.LightningDataModule,
    heads: list[str] | None = None,
    batches: int = 4,
) -> list[dict[str, Any]]:
    """One fresh model per head variant, all else as configured, on the same batches."""
    if "head" not in model.hparams:
        raise UserError("initloss needs a pretraining model (model.class_path: tiedemb.PretrainModule)")
    unknown = sorted(set(heads or ()) - set(HEADS))
    if unknown:
        raise UserError(f"initloss --heads: unknown {', '.join(unknown)}; valid: {', '.join(HEADS)}")
    data = first_batches(datamodule, batches)  # masking is drawn once: every variant sees the same targets
    repeat_rate = getattr(datamodule, "repeat_rate", 0.0) or 0.0
    rows = []
    for head in heads or list(HEADS):
        torch.manual_seed(0)
        settings = {k: v for k, v in model.hparams.items() if not k.startswith("_")}  # LightningCLI adds _class_path
        settings.pop("pretrained", None)  # fresh heads: the settings are concrete, the weights drawn anew
        variant = type(model)(**{**settings, **variant_settings(head)})
        predicted = predict_for_config(variant.config, repeat_rate=repeat_rate)
        measured = mean_loss(variant, data)
        rows.append(
            {
                "head": head,
                "measured": measured,
                "predicted": predicted.loss,
                "log_n": predicted.log_n,
                "error": measured - predicted.loss,
            }
        )
    return rows


def variant_settings(head: str) -> dict[str, Any]:
    """``head``, with the settings only other heads read at their defaults (the variant would refuse them)."""
    defaults = {name: TransformerConfig.__dataclass_fields__[name].default for name in HEAD_ONLY_SETTINGS}
    unread = {name: defaults[name] for name, owners in HEAD_ONLY_SETTINGS.items() if head not in owners}
    if head == "tied_scaled_init":
        unread["embedding_init_std"] = None  # its own std replaces the table's
    return {"head": head, **unread}


def format_table(rows: list[dict[str, Any]]) -> str:
    header = f"{'head':<18}{'measured':>10}{'predicted':>11}{'ln n':>8}{'error':>9}"
    lines = [
        f"{row['head']:<18}{row['measured']:>10.3f}{row['predicted']:>11.3f}{row['log_n']:>8.3f}{row['error']:>+9.3f}"
        for row in rows
    ]
    return "\n".join([header, "-" * len(header), *lines])
