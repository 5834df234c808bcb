"""Tied weights under Lightning's strategies (DDP, FSDP, DeepSpeed) and in checkpoints: docs/scale-out.md."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import lightning as L
import torch
from torch import nn

from tiedemb.errors import UserError
from tiedemb.nn.model import Transformer

EMBEDDING_KEY = "embedding.token.weight"
DECODER_KEY = "head.decoder.weight"


class TieBroken(UserError):
    """A tied output layer no longer shares its matrix with the token embedding."""


def _sharding_units(root: nn.Module) -> list[nn.Module]:
    """Modules that own a group of sharded parameters: FSDP1 wrappers and FSDP2 ``fully_shard`` modules."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as Unit
    except ImportError:  # torch built without distributed support
        return []
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch before 2.6: FSDP1 only
        FSDPModule = Unit
    return [module for module in root.modules() if isinstance(module, (Unit, FSDPModule))]


def check_ties(root: nn.Module, when: str = "after setup") -> None:
    """Raise ``TieBroken`` unless every tied Transformer under ``root`` still shares one Parameter, and no FSDP
    unit holds the head without the embedding or the reverse (one would shard it, the other read it whole)."""
    units = _sharding_units(root)
    for model in root.modules():
        if not isinstance(model, Transformer) or not model.head.tied:
            continue
        if not model.is_tied:
            raise TieBroken(
                f"model.head={model.config.head} must share the token embedding matrix, but {when} the output "
                "layer has a matrix of its own; something replaced the shared parameter (a wrapper, a "
                "meta-device materialisation or a weight load). Call Transformer.tie_weights() after it, "
                "or report the strategy and config that did this."
            )
        for unit in units:
            inside = {id(module) for module in unit.modules()}
            if (id(model.embedding.token) in inside) != (id(model.head.decoder) in inside):
                raise TieBroken(
                    f"model.head={model.config.head} shares the token embedding matrix with the output layer, "
                    f"but the FSDP unit around {type(getattr(unit, 'module', unit)).__name__} holds only one of the "
                    "two. Wrap transformer blocks only (auto_wrap_policy: [tiedemb.nn.model.Block], as in "
                    "configs/strategy/fsdp.yaml) so the embedding and the head stay in the root unit."
                )


class TieGuard(L.Callback):
    """Stops a run whose tied model came out of the strategy's setup (before ``on_fit_start``) untied."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        check_ties(_strategy_model(trainer, pl_module), "after the strategy's setup")

    on_validation_start = on_test_start = on_predict_start = on_fit_start


def _strategy_model(trainer: L.Trainer, pl_module: L.LightningModule) -> nn.Module:
    # The strategy's model includes the FSDP root unit, which pl_module itself does not.
    model = getattr(trainer.strategy, "model", None)
    return model if isinstance(model, nn.Module) else pl_module


def restore_tied_entries(state_dict: MutableMapping[str, Any], prefixes: list[str]) -> None:
    """Give the shared matrix both of its names under each prefix (consolidation may keep one: a strict load
    would miss the other); refuse two different matrices (an untied model's: one would silently win)."""
    for prefix in prefixes:
        embedding, decoder = prefix + EMBEDDING_KEY, prefix + DECODER_KEY
        if embedding in state_dict and decoder not in state_dict:
            state_dict[decoder] = state_dict[embedding]
        elif decoder in state_dict and embedding not in state_dict:
            state_dict[embedding] = state_dict[decoder]
        elif embedding in state_dict and decoder in state_dict:
            first, second = state_dict[embedding], state_dict[decoder]
            if first is not second and (first.shape != second.shape or not torch.equal(first, second)):
                raise TieBroken(
                    f"the checkpoint holds different matrices for {embedding} and {decoder}, so it was written "
                    "by an untied model; load it with model.head=untied"
                )


def tied_prefixes_of(module: nn.Module, prefix: str = "") -> list[str]:
    """State-dict prefixes of the tied Transformers under ``module`` (``"model."`` in PretrainModule)."""
    return [
        f"{prefix}{name}." if name else prefix
        for name, child in module.named_modules()
        if isinstance(child, Transformer) and child.head.tied
    ]
