"""Tied weights under Lightning's strategies: kept tied by DDP, FSDP and DeepSpeed, and in checkpoints.

* ``TieGuard``: once the strategy has wrapped, sharded or materialised the model, every tied
  head still shares one Parameter with the token embedding, and no FSDP unit holds one of the
  two without the other. Otherwise the run stops before its first step.
* ``restore_tied_entries``: a checkpoint that names the shared matrix once (consolidation may
  deduplicate it) gets both names back; one with two different matrices is refused.

See docs/scale-out.md.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
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


def tied_models(module: nn.Module) -> Iterator[Transformer]:
    """The Transformers under ``module`` whose head is meant to share the token matrix."""
    for child in module.modules():
        if isinstance(child, Transformer) and child.head.tied:
            yield child


def _sharding_units(root: nn.Module) -> list[nn.Module]:
    """Modules that own a group of sharded parameters: FSDP1 wrappers and FSDP2 ``fully_shard`` modules."""
    unit_types: list[type] = []
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        unit_types.append(FullyShardedDataParallel)
    except ImportError:  # torch built without distributed support
        return []
    try:
        from torch.distributed.fsdp import FSDPModule

        unit_types.append(FSDPModule)
    except ImportError:
        pass
    return [module for module in root.modules() if isinstance(module, tuple(unit_types))]


def check_ties(root: nn.Module, when: str = "after setup") -> None:
    """Raise ``TieBroken`` unless every tied Transformer under ``root`` is still tied.

    Two things can break a tie without an error of their own: a wrapper or a materialisation
    that replaces the shared Parameter by two (``is_tied`` turns false), and an FSDP unit that
    holds the head but not the embedding, or the reverse (the shared matrix is then sharded by
    one unit and read unsharded by the other: wrong numbers or a shape error at the first step).
    """
    units = _sharding_units(root)
    for model in tied_models(root):
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
                    f"but the FSDP unit around {type(_unwrapped(unit)).__name__} holds only one of the two. Wrap "
                    "transformer blocks only (auto_wrap_policy: [tiedemb.nn.model.Block], as in "
                    "configs/strategy/fsdp.yaml) so the embedding and the head stay in the root unit."
                )


def _unwrapped(unit: nn.Module) -> nn.Module:
    """The module an FSDP1 wrapper holds (its public ``module``); an FSDP2 unit is the module itself."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    return unit.module if isinstance(unit, FullyShardedDataParallel) else unit


class TieGuard(L.Callback):
    """Stops a run whose tied model came out of the strategy's setup untied.

    Lightning wraps the model (DDP, FSDP, DeepSpeed) between ``configure_model`` and
    ``on_fit_start``; the check runs at every stage's start, before the first batch.
    """

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        check_ties(_strategy_model(trainer, pl_module), "after the strategy's setup")

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        check_ties(_strategy_model(trainer, pl_module), "before validation")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        check_ties(_strategy_model(trainer, pl_module), "before testing")

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        check_ties(_strategy_model(trainer, pl_module), "before prediction")


def _strategy_model(trainer: L.Trainer, pl_module: L.LightningModule) -> nn.Module:
    # The strategy's model includes the FSDP root unit, which pl_module itself does not.
    model = getattr(trainer.strategy, "model", None)
    return model if isinstance(model, nn.Module) else pl_module


def restore_tied_entries(state_dict: MutableMapping[str, Any], prefixes: list[str]) -> None:
    """Give the shared matrix both of its names under each prefix; refuse two different matrices.

    Consolidation may keep a shared tensor under one name only (deduplicated state dicts), and a
    strict load would then report a missing key. Two entries with different values mean the
    checkpoint came from an untied model: loading them would silently keep whichever came last.
    """
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
