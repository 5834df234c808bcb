"""Scale-out: running under Lightning's DDP, FSDP and DeepSpeed with tied weights kept tied.

The strategies themselves are Lightning's, chosen in YAML (``configs/strategy/*.yaml``). What
this module adds is what they do not promise for a tied model:

* ``check_strategy_config``: a strategy this machine cannot run (DeepSpeed not installed, FSDP or
  DeepSpeed without a CUDA GPU) is refused before anything is built, in one sentence.
* ``TieGuard``: once the strategy has wrapped, sharded or materialised the model, every tied
  head still shares one Parameter with the token embedding, and no FSDP unit holds one of the
  two without the other. Otherwise the run stops before its first step.
* ``restore_tied_entries`` / ``consolidate_checkpoint``: checkpoints from any strategy become one
  file that ``PretrainModule.load_from_checkpoint`` reads on a single device, tie intact.

See docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
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


# -- before anything is built: can this strategy run here? --------------------------------------
def strategy_kind(strategy: Any) -> str | None:
    """``"fsdp"``, ``"deepspeed"``, ``"ddp"`` or None for a ``trainer.strategy`` value.

    The value may be a registered name (``deepspeed_stage_3``), a class path in a parsed config
    (a mapping with ``class_path``) or a strategy object.
    """
    if strategy is None:
        return None
    if isinstance(strategy, str):
        name = strategy
    elif isinstance(strategy, Mapping) or hasattr(strategy, "class_path"):
        name = str(strategy.get("class_path") if isinstance(strategy, Mapping) else strategy.class_path)
    else:
        name = type(strategy).__name__
    name = name.rsplit(".", 1)[-1].lower()
    for kind in ("fsdp", "deepspeed", "ddp"):
        if kind in name:
            return kind
    return None


def check_strategy_config(trainer: Any) -> None:
    """Refuse, in words, a strategy that cannot run on this machine.

    ``trainer`` is the ``trainer`` section of a parsed config (a jsonargparse Namespace or a dict).

    Lightning would otherwise fail later with an import error or a stack trace from its
    accelerator checks, after the data had been prepared.
    """
    if not trainer:
        return
    kind = strategy_kind(trainer.get("strategy"))
    if kind not in ("fsdp", "deepspeed"):
        return
    label = {"fsdp": "FSDP", "deepspeed": "DeepSpeed"}[kind]
    if kind == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise UserError(
            "trainer.strategy is DeepSpeed, but the deepspeed package is not installed; run "
            "`pip install deepspeed` (on a machine with CUDA), or choose configs/strategy/ddp.yaml or fsdp.yaml"
        )
    accelerator = trainer.get("accelerator")
    on_cpu = isinstance(accelerator, str) and accelerator.lower() == "cpu"
    if on_cpu or not torch.cuda.is_available():
        raise UserError(
            f"trainer.strategy is {label}, which runs on CUDA GPUs only"
            + (" (trainer.accelerator=cpu)" if on_cpu else " and none is visible here")
            + "; on CPUs use configs/strategy/ddp.yaml (--trainer.accelerator=cpu --trainer.devices=N)"
        )


# -- after setup: is every tied model still tied? ------------------------------------------------
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
                    "transformer blocks only (auto_wrap_policy: [tiedemb.nn.encoder.Block], as in "
                    "configs/strategy/fsdp.yaml) so the embedding and the head stay in the root unit."
                )


def _unwrapped(unit: nn.Module) -> nn.Module:
    return getattr(unit, "_fsdp_wrapped_module", unit)


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


# -- checkpoints ----------------------------------------------------------------------------------
def _tied_prefixes(state_dict: Mapping[str, Any]) -> list[str]:
    """Prefixes ``p`` for which ``p + EMBEDDING_KEY`` or ``p + DECODER_KEY`` is in ``state_dict``."""
    prefixes = []
    for key in state_dict:
        for suffix in (EMBEDDING_KEY, DECODER_KEY):
            if key.endswith(suffix) and (key == suffix or key[: -len(suffix)].endswith(".")):
                prefixes.append(key[: -len(suffix)])
    return list(dict.fromkeys(prefixes))


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


def _is_deepspeed_checkpoint(path: Path) -> bool:
    return path.is_dir() and ((path / "latest").is_file() or (path / "checkpoint").is_dir())


def _is_sharded_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / "meta.pt").is_file()


def consolidate_checkpoint(path: str | Path, output: str | Path) -> Path:
    """Write the checkpoint at ``path`` (a file, an FSDP sharded folder or a DeepSpeed folder) as
    one ``.ckpt`` file that loads on a single device, with the tied matrix under both its names.
    """
    path, output = Path(path), Path(output)
    if _is_deepspeed_checkpoint(path):
        if importlib.util.find_spec("deepspeed") is None:
            raise UserError(f"{path} is a DeepSpeed checkpoint; consolidating it needs `pip install deepspeed`")
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        # Gathers every rank's partition into fp32 tensors, on the CPU.
        convert_zero_checkpoint_to_fp32_state_dict(str(path), str(output))
        checkpoint = torch.load(output, map_location="cpu", weights_only=False)
    elif _is_sharded_checkpoint(path):
        from lightning.fabric.utilities.load import _load_distributed_checkpoint
        from lightning.pytorch.utilities.consolidate_checkpoint import _format_checkpoint

        checkpoint = _format_checkpoint(_load_distributed_checkpoint(path))
    elif path.is_file():
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    else:
        raise UserError(f"{path} is neither a checkpoint file nor a sharded FSDP or DeepSpeed checkpoint folder")
    state_dict = checkpoint.get("state_dict")
    if not isinstance(state_dict, MutableMapping):
        raise UserError(f"{path} holds no model state_dict")
    # Only checkpoints whose hyperparameters name a tied head: a GLUE classifier has an embedding
    # and no output head, an untied model two different matrices.
    head = (checkpoint.get("hyper_parameters") or {}).get("head")
    if head is not None and head != "untied":
        restore_tied_entries(state_dict, _tied_prefixes(state_dict))
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, output)
    return output


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tiedemb.scale",
        description="Turn a checkpoint from any strategy (DDP/FSDP file, FSDP sharded folder, DeepSpeed "
        "folder) into one .ckpt file for PretrainModule.load_from_checkpoint on a single device.",
    )
    parser.add_argument("checkpoint", help="checkpoint file or folder")
    parser.add_argument("output", help="the single-file checkpoint to write")
    args = parser.parse_args(argv)
    try:
        written = consolidate_checkpoint(args.checkpoint, args.output)
    except UserError as error:
        parser.exit(2, f"error: {error}\n")
    print(written)


if __name__ == "__main__":
    main()
