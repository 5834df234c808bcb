"""The command line: LightningCLI with the links, defaults and error handling tiedemb needs.

``python main.py fit --config configs/tied_orth.yaml`` — see README.md. ``main(args)`` returns the
LightningCLI object, so tests drive the real command line with a list of arguments.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from tiedemb.errors import UserError, check_choice
from tiedemb.nn.config import OBJECTIVES

DEBUG_ENV = "TIEDEMB_DEBUG"  # set to 1 to see full tracebacks of user errors

DEFAULT_LOGGERS = [
    {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"project": "tiedemb", "save_dir": "runs"}},
    {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "runs", "name": "csv"}},
]
DEFAULT_CALLBACKS = [
    {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {
            "monitor": "val/loss",
            "mode": "min",
            "save_last": True,
            "filename": "step{step}-val_loss{val/loss:.4f}",
            "auto_insert_metric_name": False,
        },
    },
]


class Trainer(L.Trainer):
    """Lightning's Trainer plus ``initloss``: predicted vs measured initial loss, no training."""

    def initloss(
        self,
        model: L.LightningModule,
        datamodule: L.LightningDataModule | None = None,
        heads: list[str] | None = None,
        batches: int = 4,
    ) -> list[dict[str, Any]]:
        """Print the initial loss of each head variant on the configured data, against theory.

        Args:
            heads: the variants to compare; all five when unset.
            batches: validation batches averaged per variant.
        """
        from tiedemb.modules.initloss import format_table, measure_initial_losses

        rows = measure_initial_losses(model, datamodule, heads=heads, batches=batches)
        print(format_table(rows))
        return rows


class ConfigSaver(SaveConfigCallback):
    """Saves the resolved config beside the run and into every logger (W&B's run config).

    A config already in the folder is never overwritten: the new one gets the next free name.
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.save_to_log_dir and not self.already_saved and trainer.log_dir is not None:
            stem, suffix = os.path.splitext(self.config_filename)
            index, name = 1, self.config_filename
            while os.path.exists(os.path.join(trainer.log_dir, name)):
                name = f"{stem}-{index}{suffix}"
                index += 1
            self.config_filename = name
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = self.parser.dump(self.config, skip_none=False, format="json")
        import json

        for logger in trainer.loggers:
            logger.log_hyperparams({"config": json.loads(config)})


class TiedembCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {**LightningCLI.subcommands(), "initloss": {"model", "datamodule"}}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # Sizes the data decides are never typed twice.
        parser.link_arguments("data.vocab_size", "model.init_args.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.pad_token_id", "model.init_args.pad_token_id", apply_on="instantiate")
        parser.set_defaults(
            {
                "model": {"class_path": "tiedemb.modules.pretrain.PretrainModule"},
                "data": {"class_path": "tiedemb.data.pretrain.PretrainData"},
                "trainer.logger": DEFAULT_LOGGERS,
                "trainer.callbacks": DEFAULT_CALLBACKS,
                "trainer.default_root_dir": "runs",
            }
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        model, data = config.get("model"), config.get("data")
        # The pretraining data collates for the model's objective (and trains the matching
        # tokenizer kind); copied here because only that pair of classes shares the setting.
        if model and data and "objective" in (model.get("init_args") or {}) and "objective" in (data.get("init_args") or {}):
            wanted, given = model.init_args.objective, data.init_args.objective
            check_choice("model.objective", wanted, OBJECTIVES)
            if given not in (None, wanted):
                raise UserError(
                    f"data.objective={given!r} disagrees with model.objective={wanted!r}; set model.objective only"
                )
            data.init_args.objective = wanted


def _use_wandb_offline_without_credentials() -> None:
    """W&B must never prompt or wait for a server: with no key, it records offline for `wandb sync`."""
    if "WANDB_MODE" in os.environ or os.environ.get("WANDB_API_KEY"):
        return
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    if netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return
    os.environ["WANDB_MODE"] = "offline"


def build_cli(args: list[str] | None = None, run: bool = True) -> TiedembCLI:
    _use_wandb_offline_without_credentials()
    os.environ.setdefault("WANDB_SILENT", "true")
    return TiedembCLI(
        model_class=L.LightningModule,
        datamodule_class=L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_class=Trainer,
        save_config_callback=ConfigSaver,
        seed_everything_default=0,
        args=args,
        run=run,
    )


def main(args: list[str] | None = None, run: bool = True) -> TiedembCLI | None:
    """Entry point. User mistakes print one message and exit 2; ``TIEDEMB_DEBUG=1`` re-raises."""
    try:
        return build_cli(args, run=run)
    except Exception as error:
        user_error = find_user_error(error)
        if user_error is None or os.environ.get(DEBUG_ENV):
            raise
        print(f"error: {user_error}", file=sys.stderr)
        raise SystemExit(2) from None


def find_user_error(error: BaseException) -> UserError | None:
    """The UserError behind ``error``: jsonargparse and Lightning wrap what constructors raise."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UserError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
