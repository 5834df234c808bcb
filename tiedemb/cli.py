"""The command line: LightningCLI with the links, defaults, run folder and error handling tiedemb needs.
``main(args)`` returns the LightningCLI object, so tests drive the real command line with a list of arguments.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from importlib.util import find_spec
from operator import attrgetter
from pathlib import Path
from typing import Any

import lightning as L
import torch
from jsonargparse import set_parsing_settings
from lightning.pytorch.callbacks import (
    LearningRateMonitor,
    ModelCheckpoint,
)
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tiedemb.data.pretrain import PretrainData
from tiedemb.errors import UserError, first_line
from tiedemb.modules.base import FROM_CHECKPOINT
from tiedemb.modules.glue import GlueModule
from tiedemb.modules.pretrain import PretrainModule
from tiedemb.modules.throughput import ModelThroughput
from tiedemb.options import (
    NonNegativeFloat,
    PositiveInt,
    as_written,
    changed_from_default,
    parameters_of,
    refuse_null,
)
from tiedemb.training.arguments import ArgumentParser
from tiedemb.training.checkpoints import (
    AtomicCheckpointIO,
    RandomState,
    SaveOnPreemption,
    check_compatible,
    check_model_kind,
    find_last_checkpoint,
    read_checkpoint,
)
from tiedemb.training.evaluation import (
    RunFolder,
    checkpoint_to_evaluate,
    given_keys,
    option_values,
    override_lines,
    rebuilt_locations,
    recorded,
    recorded_defaults,
    run_folder,
    run_limits,
    weights_only_given,
    with_run_checkpoint,
)
from tiedemb.training.exits import PREEMPTED_EXIT, report_user_errors, set_log_level_from_env
from tiedemb.training.files import first_free
from tiedemb.training.hub import make_wandb_folders, wandb_mode
from tiedemb.training.metric_names import kept_name
from tiedemb.training.monitor import ParameterCounts, TrainingMonitor
from tiedemb.training.run_checks import (
    LightningPrecision,
    PrecisionIfNative,
    check_checkpoint_name,
    check_has_split,
    check_sequence_length,
    check_trainer_options,
    resolve_precision,
    validation_beyond_the_epoch,
)
from tiedemb.training.run_dir import (
    CHECKPOINTS,
    HERE,
    base_name,
    check_run_name,
    choose_run_dir,
    run_dir_of_parent,
    share_run_dir,
    writes_in_run_dir,
)
from tiedemb.training.status_file import RunStatus

# argparse's own usage line lists each of the 100-odd options
USAGE = "%(prog)s [-h] [-c CONFIG] [--model CLASS] [--data CLASS] [--KEY VALUE ...]"
GUIDE = (
    "A config names the model and data classes (--config configs/tied_orth.yaml); --model.help PretrainModule "
    "(or GlueModule) and --data.help PretrainData (or tiedemb.data.GlueData) list their options. validate, "
    "test and predict also take a run's folder (RUN_DIR) and evaluate its checkpoint as the run had it."
)


# save_dir ".": the run's own folder under trainer.default_root_dir (training/run_dir.py).
DEFAULT_LOGGERS = [
    {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"project": "tiedemb", "save_dir": "."}},
    {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": ".", "name": "csv"}},
]
DEFAULT_CALLBACKS = [
    {
        # last.ckpt refreshed at every validation, not only on a better val/loss: --ckpt_path=last resumes the newest
        "class_path": "tiedemb.training.checkpoints.ResumableCheckpoint",
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
    """Lightning's Trainer plus the ``similarity`` subcommand, the precision
    ``bf16-mixed-if-native`` (training/precision.py) and its options that would break a run refused."""

    def __init__(
        self,
        *,
        precision: LightningPrecision | PrecisionIfNative | None = None,
        accumulate_grad_batches: PositiveInt = 1,
        check_val_every_n_epoch: PositiveInt | None = 1,
        gradient_clip_val: NonNegativeFloat | None = None,
        num_nodes: PositiveInt = 1,
        **kwargs: Any,
    ) -> None:
        """Lightning's options; those typed here bounded, as Lightning does not check them (0 batches
        divide by zero at the first batch, a negative clipping value flips every gradient).

        Args:
            precision: Lightning's values (``32-true``, ``bf16-mixed``, ...), or ``bf16-mixed-if-native``:
                bf16-mixed where the device computes bfloat16 in hardware, else 32-true (most CPUs).
        """
        check_trainer_options(kwargs)
        try:
            super().__init__(
                precision=resolve_precision(precision, kwargs.get("accelerator", "auto")),
                accumulate_grad_batches=accumulate_grad_batches,
                check_val_every_n_epoch=check_val_every_n_epoch,
                gradient_clip_val=gradient_clip_val,
                num_nodes=num_nodes,
                **kwargs,
            )
        except ValueError as error:  # Lightning refusing a setting, e.g. FSDP on a machine without a GPU
            raise UserError(f"trainer: {first_line(error)}") from None

    def fit(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().fit(*args, **kwargs)
        except ValueError as error:
            user_error = validation_beyond_the_epoch(self, error)
            if user_error is None:
                raise
            raise user_error from error

    def similarity(
        self,
        model: L.LightningModule,
        datamodule: L.LightningDataModule | None = None,
        split: str | None = None,
        samples: int = 1000,
    ) -> dict[str, float]:
        """Zero-shot paraphrase ranking of a sentence-pair task's dev split: the ROC-AUC of the cosine of
        each pair's mean-pooled sentence vectors, with a 95% bootstrap interval (``zero_shot/auroc`` ...).

        Args:
            split: the labelled split to score (default: the task's first dev split).
            samples: bootstrap resamples for the interval.
        """
        from tiedemb.modules.similarity import bootstrap_auroc, pair_similarity, write_scores

        task = getattr(datamodule, "task_spec", None)
        if not isinstance(model, GlueModule) or task is None:
            raise UserError(
                "similarity scores a GLUE sentence-pair task: give a GLUE config (model: GlueModule, "
                "data: GlueData), e.g. configs/glue/mrpc.yaml"
            )
        if len(task.text_columns) != 2 or task.num_labels != 2:
            raise UserError(
                f"similarity needs a sentence-pair task with two labels (mrpc, qqp); {task.name} has "
                f"{len(task.text_columns)} text column(s) and {task.num_labels} labels"
            )
        split = split or task.validation_splits[0]
        raw = datamodule.raw_split(split)
        model.eval()
        first, second = task.text_columns
        scores = pair_similarity(
            model.model.encode, datamodule.tokenizer, raw[first], raw[second], datamodule.max_length
        )
        labels = torch.tensor(raw["label"])
        result = bootstrap_auroc(scores, labels, samples=samples)
        metrics = {**result.metrics(), **{kept_name(name): share for name, share in model.narrowing_kept.items()}}
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
            logger.save()
            logger.finalize("success")
            if isinstance(logger, CSVLogger):  # the pairs' scores, for paired comparisons in the report
                write_scores(logger.log_dir, scores, labels)
        print(
            f"{task.name} {split}: zero-shot ROC-AUC {result.auroc:.4f} [95% bootstrap {result.low:.4f}, "
            f"{result.high:.4f}] over {result.examples} pairs"
        )
        return metrics


class ConfigSaver(SaveConfigCallback):
    """Saves the resolved config in the run's folder (the Trainer's ``default_root_dir``), never over an
    earlier one (``config-1.yaml`` ...), and into every logger (W&B's run config)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.already_saved or not self.save_to_log_dir:
            super().setup(trainer, pl_module, stage)
            return
        if trainer.is_global_zero:
            path = first_free(trainer.default_root_dir, self.config_filename)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, str(path), skip_none=False, overwrite=False, multifile=self.multifile)
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = json.loads(self.parser.dump(self.config, skip_none=False, format="json"))
        for logger in trainer.loggers:
            logger.log_hyperparams({"config": config})


class TiedembCLI(LightningCLI):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._parsers_seen: list[LightningArgumentParser] = []  # in the order of subcommands()
        super().__init__(*args, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {**LightningCLI.subcommands(), "similarity": {"model", "datamodule"}}

    def subcommand_parsers(self) -> dict[str, LightningArgumentParser]:
        """Each subcommand's parser, as add_arguments_to_parser saw them (a sweep resolves its cells with them)."""
        return dict(zip(self.subcommands(), self._parsers_seen))

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse the command line; the classes and data settings of a checkpoint it evaluates are the
        defaults a config or the command line overrides (``training/evaluation.py``)."""
        argv = sys.argv[1:] if args is None else args
        self._argv = [str(arg) for arg in argv] if isinstance(argv, (list, tuple)) else []
        path = checkpoint_to_evaluate(self._argv)
        parsers = self.subcommand_parsers() if self._argv else {}
        subcommand_parser = parsers.get(self._argv[0]) if len(parsers) == len(self.subcommands()) else None
        if path is not None and subcommand_parser is not None:
            self._checkpoint = read_checkpoint(path, weights_only=weights_only_given(self._argv))
            self._checkpoint_path = path
            subcommand_parser.set_defaults(recorded_defaults(self._checkpoint, path))
            # the batches the run's own validation scored (limit_val_batches ...), unless overridden
            self._run_limits = run_limits(path)
            subcommand_parser.set_defaults({f"trainer.{name}": value for name, value in self._run_limits.items()})
            self._data_from_checkpoint = True
        super().parse_arguments(parser, args)
        # Hidden from LightningCLI, which would put the file's hyperparameters over the parsed model
        # unchecked; before_instantiate_classes puts it back (_take_checkpoint_settings).
        subcommand = self.config.get("subcommand")
        self._ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if self._ckpt_path is not None:
            self.config[subcommand]["ckpt_path"] = None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        self._parsers_seen.append(parser)  # parse_arguments sets a checkpoint's defaults on it
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="The name of the run's folder under trainer.default_root_dir (default: the first config's "
            "name and a short id, e.g. tied_orth-1a2b3c4d); a folder that already holds something is "
            "refused. '.': trainer.default_root_dir itself is the run's folder (a sweep cell's).",
        )
        # Every subcommand takes it (a fit's saved config.yaml is read by the others); typed outside fit it is refused.
        parser.add_argument(
            "--save_transformers",
            type=bool,
            default=False,
            help="fit: also save the finished run's best checkpoint as a transformers model folder "
            "(<run folder>/transformers, as `tiedemb export` writes it); a model no transformers "
            "class holds is refused before training.",
        )
        # Sizes the data decides are never typed twice (LINKED_FROM_DATA).
        parser.link_arguments("data.vocab_size", "model.init_args.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.pad_token_id", "model.init_args.pad_token_id", apply_on="instantiate")
        # GLUE: the task decides the classifier's width and metric names (jsonargparse skips these links
        # for pretraining, whose data lacks the attribute and whose model the parameter).
        parser.link_arguments("data.num_labels", "model.init_args.num_labels", apply_on="instantiate")
        parser.link_arguments(
            "data.task_spec", "model.init_args.task", compute_fn=attrgetter("name"), apply_on="instantiate"
        )
        # The callbacks a config may replace; the ones every run gets are trainer_defaults' (cli_kwargs).
        parser.set_defaults({"trainer.callbacks": DEFAULT_CALLBACKS})

    def before_instantiate_classes(self) -> None:
        if self.subcommand and self._ckpt_path is not None:
            self.config[self.subcommand]["ckpt_path"] = self._ckpt_path
            self._take_checkpoint_settings()
        config = self.config[self.subcommand] if self.subcommand else self.config
        typed = any(arg.startswith("--save_transformers") for arg in getattr(self, "_argv", []))
        if typed and config.get("save_transformers") and self.subcommand != "fit":
            raise UserError(f"--save_transformers saves what a fit trained; {self.subcommand} trains nothing")
        model, data = config.get("model"), config.get("data")
        model_args, data_args = (model or {}).get("init_args") or {}, (data or {}).get("init_args") or {}
        # The pretraining data collates for the model's objective: copied, as only that pair shares it.
        if "objective" in model_args and "objective" in data_args:
            # a checkpoint's own settings (evaluation) are the model's dict_kwargs, over its init_args
            wanted = (model.get("dict_kwargs") or {}).get("objective", model.init_args.objective)
            given = data.init_args.objective
            if given not in (None, wanted):
                raise UserError(
                    f"data.objective={given!r} disagrees with model.objective={wanted!r}; set model.objective only"
                )
            data.init_args.objective = wanted
        if model and data:
            resolve_pretrained_tokenizer(model, data)
        if getattr(self, "_data_from_checkpoint", False):
            self._overrides = [
                *getattr(self, "_overrides", []),
                *self._rebuild_data(config, str(config.ckpt_path)),
                *self._limit_overrides(config),
            ]
        for line in getattr(self, "_overrides", []):
            say(line)
        from_checkpoint = self.subcommand != "fit" and getattr(self, "_checkpoint", None) is not None
        if model and not from_checkpoint:  # evaluation takes the checkpoint's settings, these included
            refuse_linked_settings(model)
        for group in ("model", "data"):
            if config.get(group):
                refuse_null(group, config[group])
        # jsonargparse would bury Lightning's own message under a report on every type the option takes
        if "deepspeed" in str(config.get("trainer", {}).get("strategy")).lower() and not find_spec("deepspeed"):
            raise UserError(
                "trainer.strategy is DeepSpeed, but the deepspeed package is not installed (pip install deepspeed)"
            )

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        """The Trainer, built once with the run's folder, loggers, plugins and the monitors that need a logger."""
        folder = self._choose_run_dir()
        loggers = self._loggers_in(folder)
        settings = self._built_trainer()
        logger = loggers.get("logger", settings.get("logger"))
        given = settings.get("callbacks") or []
        callbacks = given if isinstance(given, list) else [given]
        logs = logger is None or logger is True or bool(logger)
        wanted = [  # each added where the config lists none of its kind
            *([LearningRateMonitor] if logs else []),
            *([TrainingMonitor] if logs and isinstance(self.model, PretrainModule) else []),
            *([ModelCheckpoint] if settings.get("enable_checkpointing") is not False else []),
        ]
        callbacks = [*callbacks, *(kind() for kind in wanted if not any(isinstance(c, kind) for c in callbacks))]
        for callback in [*callbacks, *self.trainer_defaults["callbacks"]]:
            # status.json also at the top of its run folder, except in a folder whose status.json a sweep keeps
            if isinstance(callback, RunStatus) and self._settings().get("run_name") != HERE:
                callback.run_dir = str(folder)
            # <run>/checkpoints, a relative root kept relative: evaluation finds a moved run from it.
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(folder / CHECKPOINTS)
        return super().instantiate_trainer(
            **{"default_root_dir": str(folder), **loggers, **self._plugins(), "callbacks": callbacks, **kwargs}
        )

    def _plugins(self) -> dict[str, Any]:
        """The Trainer's ``plugins`` with crash-safe checkpoint files, unless the config gives a writer of its own."""
        given = self._built_trainer().get("plugins")
        given = [] if given is None else given if isinstance(given, list) else [given]
        if any(isinstance(plugin, CheckpointIO) for plugin in given):
            return {}
        return {"plugins": [*given, AtomicCheckpointIO()]}

    def _take_checkpoint_settings(self) -> None:
        """Read a ``--ckpt_path`` file once, up front, a bad one a user error. Evaluation builds the model
        the checkpoint describes, the settings typed on the command line over the recorded ones, each said;
        ``fit`` keeps the configured model (a checkpoint of another one is refused: ``_prepare_checkpoint``)."""
        subcommand = self.subcommand
        settings = self.config[subcommand]
        path = settings.get("ckpt_path")
        if not path or path in ("last", "best", "hpc") or "://" in str(path):
            return
        if getattr(self, "_checkpoint_path", None) != path:
            self._checkpoint = read_checkpoint(path, weights_only=settings.get("weights_only") is not False)
        class_path, hparams = recorded(self._checkpoint, "hyper_parameters")
        if subcommand == "fit" or not (class_path or hparams):
            return
        configured = (settings.get("model") or {}).get("class_path")
        if class_path and configured:
            # Lightning would build the checkpoint's class whatever the config names
            check_model_kind(path, class_path, configured)
        typed = given_keys(self._argv, "model")
        init_args = settings.model.get("init_args")
        typed_values = {name: init_args[name] for name in typed if name in (init_args or {})}
        lines = override_lines("model", hparams, typed_values, typed) if init_args else []
        hparams = {name: value for name, value in hparams.items() if name not in typed}
        # Built for the checkpoint's weights: the pretrained source its settings name is not read.
        class_path = class_path or configured
        model = {"class_path": class_path, "dict_kwargs": {**hparams, FROM_CHECKPOINT: True}} if class_path else hparams
        self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)
        self._overrides = lines  # said with the data's, once those are resolved (before_instantiate_classes)

    def _rebuild_data(self, settings: Any, path: str) -> list[str]:
        """Put the checkpoint's data locations as found now into ``settings``; lines saying what changed."""
        class_path, recorded_settings = recorded(self._checkpoint, "datamodule_hyper_parameters")
        data = settings.get("data")
        if data is None or not class_path:
            return []
        typed = given_keys(self._argv, "data")
        if data.class_path != class_path:
            typed_class = any(arg.startswith("--data=") or arg == "--data" for arg in self._argv)
            return [
                f"data: {class_path} (checkpoint) -> {data.class_path} ({'command line' if typed_class else 'config'})"
            ]
        current = data.init_args.as_dict()
        folder = run_folder(self._checkpoint, path)
        found = rebuilt_locations(current, recorded_settings, folder)
        lines = override_lines("data", recorded_settings, current, typed)
        for name, value in found.items():
            data.init_args[name] = value
            lines.append(
                f"data.{name}: {as_written(current[name])} (checkpoint, relative to the run's folder "
                f"{str(folder)!r}) -> {as_written(value)}"
            )
        return lines

    def _limit_overrides(self, settings: Any) -> list[str]:
        """One line per Trainer limit the run set (``run_limits``) that a config or the command line changed."""
        limits = getattr(self, "_run_limits", {})
        trainer = settings.get("trainer") or {}
        typed = given_keys(self._argv, "trainer")
        return [
            f"trainer.{name}: {as_written(recorded_value)} (the run's config.yaml) -> {as_written(trainer.get(name))} "
            f"({'command line' if name in typed else 'config'})"
            for name, recorded_value in limits.items()
            if trainer.get(name) != recorded_value
        ]

    def before_fit(self) -> None:
        if isinstance(self.datamodule, PretrainData):
            self.datamodule.check_one_batch()
        if self._settings().get("save_transformers"):  # a model no transformers class holds: refused before training
            from tiedemb.weights.export_plan import plan_export

            kind = "glue" if isinstance(self.model, GlueModule) else "pretrain"
            try:
                plan_export(dict(self.model.hparams), self.model.state_dict(), kind, "this run")
            except UserError as error:
                raise UserError(f"--save_transformers: {error}") from None
        self._prepare_run(fitting=True)

    def after_fit(self) -> None:
        """``--save_transformers``: the run's best checkpoint (else its newest) as a transformers folder."""
        from tiedemb.training.run_dir import export_beside

        callback = self.trainer.checkpoint_callback
        if not self._settings().get("save_transformers") or not self.trainer.is_global_zero or callback is None:
            return
        chosen = callback.best_model_path or callback.last_model_path
        if chosen:
            has_tokenizer = getattr(self.datamodule, "source", None) != "synthetic"
            say(export_beside(Path(chosen), self.run_dir, has_tokenizer)[1])

    def before_validate(self) -> None:
        self._prepare_run()

    def before_test(self) -> None:
        self._check_split("test")
        self._prepare_run()

    def before_predict(self) -> None:
        self._check_split("predict")
        self._prepare_run()

    def _check_split(self, subcommand: str) -> None:
        check_has_split(subcommand, None if self.datamodule is None else type(self.datamodule))

    def _prepare_run(self, fitting: bool = False) -> None:
        check_sequence_length(self.model, self.datamodule)
        self._prepare_checkpoint(fitting)  # before W&B makes its folder: the checkpoint may be refused
        say(f"run folder: {self.run_dir}{' (continued)' if self._continued else ''}")
        make_wandb_folders(self.trainer.loggers)

    def _prepare_checkpoint(self, fitting: bool = False) -> None:
        """Resolve ``--ckpt_path`` and vet the checkpoint."""
        config = self.config_init[self.subcommand]
        if config.get("weights_only") is None:
            config["weights_only"] = True  # never unpickle arbitrary objects unless asked to
        path = config.get("ckpt_path")
        check_checkpoint_name(path, self.subcommand)
        if path == "last":
            found = self._found_last  # looked for before the run's folder was chosen (_choose_run_dir)
            looked = f"--ckpt_path=last found no checkpoint of this configuration under {', '.join(self._roots)}"
            if found is None and not fitting:
                # evaluating the weights the config builds instead would give figures of an untrained model
                raise UserError(
                    f"{looked}; {self.subcommand} scores a trained model: pass its checkpoint file "
                    "(--ckpt_path=<run>/checkpoints/<name>.ckpt), or run it where its runs are"
                )
            if self.trainer.global_rank == 0:
                if found is None:
                    print(f"warning: {looked}; starting from scratch", file=sys.stderr)
                else:
                    print(f"{'resuming from' if fitting else 'evaluating'} {found}", file=sys.stderr)
            config["ckpt_path"] = path = str(found) if found is not None else None
        elif path not in (None, "best", "hpc") and "://" not in str(path):
            checkpoint = getattr(self, "_checkpoint", None) or read_checkpoint(
                path, weights_only=bool(config["weights_only"])
            )
            check_compatible(checkpoint, path, self.model)
            self._checkpoint = None  # Lightning reads it again; do not hold two copies
        if not fitting and path is not None:
            # An evaluation writes no checkpoints: the callbacks' state, which Lightning warns about, is of no use.
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
            warnings.filterwarnings("ignore", message="Be aware that when using `ckpt_path`, callbacks used to create")
        if type(self.datamodule).state_dict is not L.LightningDataModule.state_dict:
            # The datamodule resumes its own data position (tiedemb.data.sampling), unseen by Lightning's warning
            warnings.filterwarnings(
                "ignore", message="You're resuming from a checkpoint that ended before the epoch ended"
            )

    # -- the run's folder (training/run_dir.py) ------------------------------------------------------
    def _settings(self) -> Any:
        return self.config[self.subcommand] if self.subcommand else self.config

    def _built_trainer(self) -> Any:
        return (self.config_init[self.subcommand] if self.subcommand else self.config_init)["trainer"]

    def _choose_run_dir(self) -> Path:
        """Choose the run's folder under ``trainer.default_root_dir`` (``training/run_dir.py``), once the model
        and data are built (``--ckpt_path=last`` needs them, and the checkpoint it finds decides the folder)."""
        settings = self._settings()
        trainer = settings.get("trainer") or {}
        root = str(trainer.get("default_root_dir") or "runs")
        run_name = settings.get("run_name")
        if run_name is not None:
            check_run_name(run_name)  # before looking for a checkpoint
        path = settings.get("ckpt_path")
        self._roots = self._run_roots(root)
        self._found_last = None
        if path == "last":
            self._found_last = path = find_last_checkpoint(self._roots, self.model, self.datamodule)
        elif path in ("best", "hpc") or "://" in str(path):
            path = None
        # the command line's configs (the parsed list also holds the ones a config includes)
        configs = option_values(getattr(self, "_argv", []), "--config")
        if configs:
            name = base_name(configs)
        elif path and Path(str(path)).expanduser().resolve().parent.name == CHECKPOINTS:
            name = Path(str(path)).expanduser().resolve().parent.parent.name  # evaluating another run's checkpoint
        else:
            name = self.subcommand or "run"
        # A DDP rank > 0, started by rank 0 running this command line again, takes rank 0's folder.
        inherited = run_dir_of_parent()
        folder, continued = (inherited, True) if inherited is not None else choose_run_dir(root, run_name, name, path)
        share_run_dir(folder)
        self.run_dir, self._continued = folder, continued
        return folder

    def _loggers_in(self, folder: Path) -> dict[str, Any]:
        """The ``logger`` argument, each logger that writes into the run's folder rebuilt with it as ``save_dir``."""
        settings = self._settings()
        specs = (settings.get("trainer") or {}).get("logger")
        built = self._built_trainer()["logger"]
        if not specs or specs is True or built is None or isinstance(built, bool):
            return {}
        specs, built = (specs, built) if isinstance(specs, list) else ([specs], [built])
        root = str(settings.trainer.default_root_dir or "runs")
        # offline where W&B cannot go online, through the logger's own mode (wandb.init's argument)
        mode = wandb_mode() if any(isinstance(logger, WandbLogger) for logger in built) else None
        loggers = []
        for spec, logger in zip(specs, built):
            init = spec.get("init_args") if hasattr(spec, "get") else None
            arguments = {**(init.as_dict() if hasattr(init, "as_dict") else dict(init or {}))}
            arguments.update(dict(spec.get("dict_kwargs") or {}))
            changed = {}
            if "save_dir" in arguments and writes_in_run_dir(arguments["save_dir"], root):
                changed["save_dir"] = str(folder)
            if isinstance(logger, WandbLogger) and not arguments.get("name"):
                changed["name"] = folder.name  # the W&B page names a run as its folder does
            if mode and isinstance(logger, WandbLogger) and not (arguments.get("mode") or arguments.get("offline")):
                changed["mode"] = mode
                if "WANDB_SILENT" not in os.environ and arguments.get("settings") is None:
                    changed["settings"] = {"silent": True}  # nothing to link to: keep the log quiet
            if changed:
                logger = type(logger)(**{**arguments, **changed})
            loggers.append(logger)
        return {"logger": loggers}

    def _run_roots(self, root: str) -> list[str]:
        """Folders under which runs of this command line keep their checkpoints (``--ckpt_path=last``)."""
        callbacks = self._built_trainer().get("callbacks") or []
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
        roots = [root, *(c.dirpath for c in callbacks if isinstance(c, ModelCheckpoint) and c.dirpath)]
        return list(dict.fromkeys(str(Path(root).expanduser()) for root in roots))


@rank_zero_only
def say(line: str) -> None:
    """A line to the user on stderr, from the first process only (under DDP each process runs the command line)."""
    print(line, file=sys.stderr)


LINKED_FROM_DATA = {
    "vocab_size": "data.vocab_size or the tokenizer",
    "pad_token_id": "the tokenizer",
    "num_labels": "data.task",
    "task": "data.task",
}
"""Model settings the command line takes from the data (``link_arguments`` above), and from where."""


def refuse_linked_settings(model: Any) -> None:
    """Refuse a model setting the data decides (jsonargparse would overwrite it with the data's without a word)."""
    parameters = parameters_of(str(model.get("class_path", "")))
    if parameters is None:
        return
    settings = model.get("init_args") or {}
    for name, source in LINKED_FROM_DATA.items():
        value = settings.get(name)
        if name in parameters and changed_from_default(value, parameters[name].default):
            raise UserError(
                f"model.{name}={as_written(value)} is set from the data ({source}); "
                "leave it out of the model's settings"
            )


def resolve_pretrained_tokenizer(model: Any, data: Any) -> None:
    """Replace ``data.tokenizer: pretrained`` by the tokenizer ``model.pretrained`` was trained with
    (a tiedemb checkpoint names it; a transformers folder or hub name holds its own)."""
    settings, data_settings = model.get("init_args") or {}, data.get("init_args") or {}
    if data_settings.get("tokenizer") != "pretrained":
        return
    pretrained = settings.get("pretrained")
    if not pretrained:
        raise UserError(
            "data.tokenizer='pretrained' takes the tokenizer of model.pretrained, which is "
            "unset; name a tokenizer, or the model to start from"
        )
    path = Path(str(pretrained)).expanduser()
    if path.is_dir() or not path.suffix == ".ckpt":
        data_settings["tokenizer"] = str(pretrained)  # a transformers folder or hub name holds its tokenizer
        return
    from tiedemb.data.tokenizers import recorded_fingerprint, tokenizer_of_run

    checkpoint = read_checkpoint(path)
    hparams = checkpoint.get("hyper_parameters") or {}
    recorded = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    found = tokenizer_of_run(
        recorded,
        int(hparams.get("vocab_size") or 0),
        str(hparams.get("objective") or "mlm"),
        fingerprint=recorded_fingerprint(checkpoint),
    )
    if found is None:
        raise UserError(
            f"data.tokenizer='pretrained': the run of {str(pretrained)!r} names no tokenizer "
            "that can be found from here (its trained tokenizer is kept under its data.cache_dir, relative "
            "to the folder it ran in); pass --data.tokenizer=<folder>"
        )
    data_settings["tokenizer"] = found
    print(f"data.tokenizer: {found} (the tokenizer {str(pretrained)!r} was trained with)", file=sys.stderr)


# Lightning 2.6 builds torch's LeafSpec, deprecated from torch 2.10: nothing a user can act on.
_LIGHTNING_LEAFSPEC_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
# Mixed precision keeps the parameters in float32: the model summary's 32-bit sizes are right.
_SUMMARY_MIXED_PRECISION_WARNING = r"Precision (bf16-|16-)?mixed is not supported by the model summary"


def build_cli(args: list[str] | None = None, run: bool = True) -> TiedembCLI:
    set_log_level_from_env()
    # ``main.py --print_completion=shtab-bash``: jsonargparse's completion script of every subcommand
    set_parsing_settings(add_print_completion_argument=True)
    # validate/test/predict RUN_DIR: the run's folder stands for its checkpoint (training/evaluation.py)
    argv = sys.argv[1:] if args is None else args
    if isinstance(argv, (list, tuple)):
        rewritten = with_run_checkpoint(argv)
        if rewritten != [str(argument) for argument in argv]:
            if args is None:
                # LightningCLI reads sys.argv itself, and warns when given args beside a command line
                sys.argv[1:] = rewritten
            else:
                args = rewritten
    # silenced for this command only (and those _prepare_checkpoint silences)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_LIGHTNING_LEAFSPEC_WARNING, category=FutureWarning)
        warnings.filterwarnings("ignore", message=_SUMMARY_MIXED_PRECISION_WARNING, category=UserWarning)
        return TiedembCLI(
            **cli_kwargs(),
            save_config_callback=ConfigSaver,
            parser_kwargs={name: {"usage": USAGE, "description": GUIDE} for name in TiedembCLI.subcommands()},
            args=args,
            run=run,
        )


def cli_kwargs() -> dict[str, Any]:
    """What every TiedembCLI is built with (also a sweep's cells)."""
    trainer_defaults = {
        "logger": DEFAULT_LOGGERS,
        "default_root_dir": "runs",
        # Added to the callbacks of every run, whatever its config lists; made afresh for each command line.
        "callbacks": [
            RandomState(),  # random states travel in checkpoints
            SaveOnPreemption(),  # a run stopped by SIGTERM saves its state (training/preemption.py)
            ParameterCounts(),  # params/total, params/embedding for the reports
            RunFolder(),  # the folder the run started in: its relative data locations are relative to it
            RunStatus(),  # status.json: how the run ended, so reports leave out half-done runs
            ModelThroughput(),  # tokens and FLOPs per second
        ],
    }
    return {
        "model_class": L.LightningModule,
        "datamodule_class": L.LightningDataModule,
        "subclass_mode_model": True,
        "subclass_mode_data": True,
        "trainer_class": Trainer,
        "parser_class": ArgumentParser,
        "seed_everything_default": 0,
        # no --optimizer/--lr_scheduler: the modules configure their own AdamW, groups and schedule
        "auto_configure_optimizers": False,
        "trainer_defaults": trainer_defaults,
    }


def main(args: list[str] | None = None, run: bool = True) -> TiedembCLI | None:
    """Entry point. User mistakes print one message and exit 2; ``TIEDEMB_DEBUG=1`` re-raises."""
    try:
        outcome = report_user_errors(lambda: build_cli(args, run=run))
    except SIGTERMException:
        print("stopped by SIGTERM; --ckpt_path=last resumes it", file=sys.stderr)
        raise SystemExit(PREEMPTED_EXIT) from None
    if isinstance(outcome, int):  # the exit status of a user error, already reported
        raise SystemExit(outcome)
    return outcome
