"""Settings a run cannot work with, refused before any data is prepared or any logger starts, in one
sentence each, instead of a stack trace later (or, for a negative clipping value, nothing at all).
"""

from __future__ import annotations

from typing import Any

import lightning as L

from tiedemb.errors import UserError
from tiedemb.nn.config import TransformerConfig

SEQUENCE_LENGTH_OPTIONS = ("block_size", "max_length")
"""The data options that bound a batch's sequence length: pretraining's blocks, GLUE's pairs."""


def check_trainer_options(options: dict[str, Any]) -> None:
    """Refuse an integer ``val_check_interval`` below 1, which breaks a run."""
    interval = options.get("val_check_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval < 1:
        raise UserError(
            f"trainer.val_check_interval must be a number of batches >= 1 or a fraction of an "
            f"epoch in (0, 1], got {interval}"
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


def check_checkpoint_name(path: Any, subcommand: str) -> None:
    """Refuse ``--ckpt_path`` names Lightning resolves only inside the Trainer call, where it fails.

    ``best`` is the best checkpoint of a fit run earlier by the same Trainer object, which a command
    line never has; ``hpc`` is a SLURM checkpoint in ``default_root_dir``, which a run folder of its
    own never holds.
    """
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
