"""Settings a run cannot work with, refused before it starts, in one sentence each.

Each of these used to fail later: inside Lightning's Trainer call with a stack trace (a checkpoint
name it cannot resolve, a validation interval beyond the epoch), at the first batch (a division
by zero, a sequence longer than the positions), or not at all (a negative clipping value turns
every gradient around). The command line calls them once the objects are built and before any
data is prepared or any logger starts.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from tiedemb.errors import UserError
from tiedemb.nn.config import TransformerConfig
from tiedemb.options import NonNegativeFloat, PositiveInt, check_arguments
from tiedemb.training.run_dir import newest_hpc_checkpoint

TRAINER_OPTIONS = {
    "accumulate_grad_batches": PositiveInt,
    "check_val_every_n_epoch": PositiveInt | None,
    "gradient_clip_val": NonNegativeFloat | None,
    "num_nodes": PositiveInt,
}
"""Trainer options Lightning takes unchecked, each of which would break a run later: 0 divides by
zero at the first batch, a negative clipping value multiplies every gradient by a negative factor."""

SEQUENCE_LENGTH_OPTIONS = ("block_size", "max_length")
"""The data options that bound a batch's sequence length: pretraining's blocks, GLUE's pairs."""


def check_trainer_options(options: dict[str, Any]) -> None:
    """Refuse the values of ``TRAINER_OPTIONS`` (and an integer ``val_check_interval``) that break a run."""
    check_arguments("trainer", TRAINER_OPTIONS, options)
    interval = options.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval < 1:
        raise UserError(
            f"trainer.val_check_interval must be a number of batches >= 1 or a fraction of an "
            f"epoch in (0, 1], got {interval}"
        )


OPTIMISER_SETTINGS = (
    "model.learning_rate",
    "model.weight_decay",
    "model.betas",
    "model.eps",
    "model.warmup_steps",
    "model.lr_decay",
)
"""The modules' own optimiser and schedule settings, which ``--optimizer`` and ``--lr_scheduler`` would bypass."""


def check_no_optimizer_options(config: Any) -> None:
    """Refuse LightningCLI's ``--optimizer`` and ``--lr_scheduler``, on the command line or in a config.

    LightningCLI would replace the modules' ``configure_optimizers`` (AdamW over two parameter
    groups, biases and norms without weight decay, with warmup and decay) by a plain optimiser over
    every parameter, and the run would go on without a word while ignoring the model's settings.
    """
    for option in ("optimizer", "lr_scheduler"):
        value = config.get(option)
        if value is not None:
            name = value.get("class_path", value) if hasattr(value, "get") else value
            raise UserError(
                f"--{option}={str(name).rpartition('.')[2]} would replace the modules' own AdamW, its parameter groups "
                f"(no weight decay on biases and norms) and its warmup and decay; leave {option} out and set "
                f"{', '.join(OPTIMISER_SETTINGS[:-1])} or {OPTIMISER_SETTINGS[-1]} instead"
            )


def validation_beyond_the_epoch(trainer: L.Trainer, error: ValueError) -> UserError | None:
    """The user error behind Lightning's ``ValueError`` for a ``val_check_interval`` above the epoch's
    batches (known only once the training data is loaded), or None for any other error."""
    if "`val_check_interval`" not in str(error) or not isinstance(trainer.val_check_interval, int):
        return None
    return UserError(
        f"trainer.val_check_interval={trainer.val_check_interval} is more than the {trainer.fit_loop.max_batches} "
        f"training batches of an epoch; lower it, or set trainer.check_val_every_n_epoch=null to count it in "
        f"batches across epochs"
    )


def check_checkpoint_name(path: Any, subcommand: str, trainer: L.Trainer) -> None:
    """Refuse ``--ckpt_path`` names Lightning resolves only inside the Trainer call, where it fails.

    ``best`` is the best checkpoint of a fit run earlier by the same Trainer object, which a command
    line never has; ``hpc`` is the newest SLURM checkpoint in ``default_root_dir``, if there is one.
    """
    if path == "best":
        raise UserError(
            "--ckpt_path=best names the best checkpoint of a fit run earlier in the same process, "
            f"which a {subcommand} command never has; pass the checkpoint file "
            "(<run>/checkpoints/<name>.ckpt) or --ckpt_path=last"
        )
    if path == "hpc" and newest_hpc_checkpoint(trainer.default_root_dir) is None:
        raise UserError(
            f"--ckpt_path=hpc found no SLURM checkpoint (hpc_ckpt_<N>.ckpt) in {trainer.default_root_dir}; "
            "pass the checkpoint file or --ckpt_path=last"
        )


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
    """Refuse ``test`` or ``predict`` on data without that split: Lightning would fail at the start
    of the loop, after the run and its W&B record had started."""
    method, message = _SPLITS[subcommand]
    if data_class is not None and getattr(data_class, method) is getattr(L.LightningDataModule, method):
        raise UserError(message.format(data=data_class.__name__))


def check_sequence_length(model: L.LightningModule, datamodule: L.LightningDataModule | None) -> None:
    """Refuse data longer than the model has positions for.

    Learned positions have ``max_position_embeddings`` rows and rotary ones that many angles; a
    longer batch would fail inside the first forward pass, after the data was prepared.
    """
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


SMALL_VOCABULARY = 100
"""Fewer tokens than this is no tokenizer for real text or a GLUE task (BERT's has 30522)."""


def small_vocabulary(datamodule: Any) -> str | None:
    """The warning line for data whose tokenizer has fewer than ``SMALL_VOCABULARY`` tokens, else None.

    Such a run trains, but on text its tokenizer cannot spell (most of it ``[UNK]``): a made-up or
    half-saved tokenizer folder passed by mistake. The embedded corpus has no tokenizer and any size.
    """
    tokenizer = getattr(datamodule, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "__len__"):
        return None
    count = len(tokenizer)
    if count >= SMALL_VOCABULARY:
        return None
    name = getattr(tokenizer, "name_or_path", "") or "the data's"
    return (
        f"warning: the tokenizer {name!r} has {count} tokens; real text or a GLUE task needs thousands "
        "(BERT's has 30522), so most of it will read as unknown: is it the tokenizer you meant?"
    )
