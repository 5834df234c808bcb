"""The Trainer's settings: those a run cannot work with refused before any data is prepared or any logger
starts, in one sentence each, instead of a stack trace later (or, for a negative clipping value, nothing at
all); ``trainer.precision: bf16-mixed-if-native``: bf16-mixed where the hardware computes bfloat16 (CUDA
GPUs from Ampere on, CPUs with AVX512-BF16 or AMX), 32-true where torch would emulate it many times slower
than float32 (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_type_hints

import lightning as L
import torch
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.utilities import rank_zero_info

from tiedemb.errors import UserError
from tiedemb.nn.config import TransformerConfig

SEQUENCE_LENGTH_OPTIONS = ("block_size", "max_length")  # pretraining's blocks, GLUE's pairs


def check_trainer_options(options: dict[str, Any]) -> None:
    """Refuse an integer ``val_check_interval`` below 1, which breaks a run."""
    interval = options.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval < 1:
        raise UserError(
            f"trainer.val_check_interval must be a number of batches >= 1 or a fraction of an "
            f"epoch in (0, 1], got {interval}"
        )


def validation_beyond_the_epoch(trainer: L.Trainer, error: ValueError) -> UserError | None:
    """The user error behind Lightning's ``ValueError`` for a ``val_check_interval`` above the epoch's batches."""
    if "`val_check_interval`" not in str(error) or not isinstance(trainer.val_check_interval, int):
        return None
    return UserError(
        f"trainer.val_check_interval={trainer.val_check_interval} is more than the {trainer.fit_loop.max_batches} "
        f"training batches of an epoch; lower it, or set trainer.check_val_every_n_epoch=null to count it in "
        f"batches across epochs"
    )


def check_checkpoint_name(path: Any, subcommand: str) -> None:
    """Refuse ``--ckpt_path`` names Lightning resolves only inside the Trainer call, where it fails."""
    if path == "best":
        raise UserError(
            "--ckpt_path=best names the best checkpoint of a fit run earlier in the same process, "
            f"which a {subcommand} command never has; pass the checkpoint file "
            "(<run>/checkpoints/<name>.ckpt) or --ckpt_path=last"
        )
    if path == "hpc":
        raise UserError("--ckpt_path=hpc names a SLURM checkpoint, which runs do not keep; pass the checkpoint file")


# What each evaluating subcommand needs from the data, and the line refusing data without it.
_SPLITS = {
    "test": (
        "test_dataloader",
        "test scores a held-out split (GLUE's dev sets, pretraining's held-out text), and {data} has none",
    ),
    "predict": (
        "predict_dataloader",
        "predict writes GLUE submission files, and {data} has no unlabelled split to predict; for a "
        "pretraining model's loss on held-out text use validate or test",
    ),
}


def check_has_split(subcommand: str, data_class: type[L.LightningDataModule] | None) -> None:
    """Refuse ``test`` or ``predict`` on data without that split, before the run and its W&B record start."""
    method, message = _SPLITS[subcommand]
    if data_class is not None and getattr(data_class, method) is getattr(L.LightningDataModule, method):
        raise UserError(message.format(data=data_class.__name__))


def check_sequence_length(model: L.LightningModule, datamodule: L.LightningDataModule | None) -> None:
    """Refuse data longer than the model has positions for (it would fail inside the first forward pass,
    after the data was prepared)."""
    config = getattr(model, "config", None)
    if not isinstance(config, TransformerConfig) or config.position == "none" or datamodule is None:
        return
    for option in SEQUENCE_LENGTH_OPTIONS:
        length = datamodule.hparams.get(option)
        if length is not None and length > config.max_position_embeddings:
            raise UserError(
                f"data.{option}={length} is longer than "
                f"model.max_position_embeddings={config.max_position_embeddings}, "
                f"where the model's {config.position} positions end; lower data.{option} or raise "
                f"model.max_position_embeddings"
            )


PrecisionIfNative = Literal["bf16-mixed-if-native"]
LightningPrecision = get_type_hints(L.Trainer.__init__)["precision"]  # from Lightning's public signature
BF16_IF_NATIVE: str = get_args(PrecisionIfNative)[0]


def runs_on_cpu(accelerator: Any) -> bool:
    """Whether a Trainer given this ``accelerator`` setting (a name or an Accelerator) trains on the CPU."""
    if isinstance(accelerator, CPUAccelerator) or accelerator == "cpu":
        return True
    return accelerator in ("auto", None) and not torch.cuda.is_available()


def bf16_is_native(on_cpu: bool) -> bool:
    """Whether this machine computes bfloat16 products in hardware (not through fallback kernels)."""
    if on_cpu:
        # torch's runtime CPU feature report (cpuinfo); torch versions without it are taken as emulating bf16
        capabilities = getattr(torch.cpu, "get_capabilities", dict)()
        return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def resolve_precision(precision: Any, accelerator: Any) -> Any:
    """``precision`` for Lightning's Trainer: ``bf16-mixed-if-native`` resolved, said in one line."""
    if precision != BF16_IF_NATIVE:
        return precision
    on_cpu = runs_on_cpu(accelerator)
    native = bf16_is_native(on_cpu)
    chosen = "bf16-mixed" if native else "32-true"
    rank_zero_info(
        f"trainer.precision={BF16_IF_NATIVE}: {chosen} (this {'CPU' if on_cpu else 'GPU'} "
        f"{'computes' if native else 'has no hardware for'} bfloat16)"
    )
    return chosen
