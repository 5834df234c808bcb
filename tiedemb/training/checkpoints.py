"""A run's checkpoints: written crash-safe, ``last`` the newest state (also on SIGTERM), random states in
them; the one a run starts from found (``--ckpt_path=last``), read and vetted, a bad one one ``UserError``.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tiedemb.errors import UserError, first_line
from tiedemb.training.files import atomic_write
from tiedemb.training.run_dir import BEST_NAME

log = logging.getLogger("tiedemb")

EXCLUDED_FROM_IDENTITY = frozenset(
    {
        "compile",
        "peak_flops",
        "num_workers",
        "pin_memory",
        "num_proc",
        "cache_dir",
        "predictions_dir",
        "write_test_predictions",
        "pretrained",
    }
)
"""Settings that change how fast a run goes or where it writes, not what it computes (``pretrained``
only seeds the weights a checkpoint already holds): a resumed or evaluated run may change them."""

TRAINING_SETTINGS = frozenset(
    {
        "learning_rate",
        "weight_decay",
        "betas",
        "eps",
        "warmup_steps",
        "lr_decay",
        "min_lr_ratio",
        "dropout",
        "attention_dropout",
        "classifier_dropout",
        "warmup_ratio",
    }
)
"""Optimisation settings: an explicitly given checkpoint may be continued with other values."""


# --------------------------------------------------------------------------- the newest state on disk


class ResumableCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last`` is the newest state at every validation and at the end of a fit
    (Lightning refreshes it only when the monitored metric improved: a resumed run would repeat steps)."""

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Lightning calls this for every checkpoint written, by any callback: the step is saved.
        self.saved_at_step = trainer.global_step

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        self._refresh_last(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A fit that ends between validations (max_steps not a multiple of the validation interval)
        # would leave last.ckpt at the last validation: the final steps are saved here.
        super().on_train_end(trainer, pl_module)
        self._refresh_last(trainer)

    def _refresh_last(self, trainer: L.Trainer) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking and not trainer.fast_dev_run
        if self.save_last and fitting and getattr(self, "saved_at_step", None) != trainer.global_step:
            write_last(self, trainer)


def write_last(callback: ModelCheckpoint, trainer: L.Trainer) -> str:
    """Write ``callback``'s ``last`` checkpoint now (``last_model_path`` set first: the checkpoint names it)."""
    metrics = {**trainer.callback_metrics, "epoch": trainer.current_epoch, "step": trainer.global_step}
    path = callback.last_model_path or callback.format_checkpoint_name(metrics, callback.CHECKPOINT_NAME_LAST)
    callback.last_model_path = path
    trainer.save_checkpoint(path, callback.save_weights_only)
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.after_save_checkpoint(callback)
    return path


class SaveOnPreemption(Callback):
    """On SIGTERM, saves every ``last`` checkpoint at the step the run stopped after (``tiedemb.cli.main``
    then exits 143).

    Lightning notes a SIGTERM, lets the step complete and raises ``SIGTERMException``; any other exception
    may leave a step half-done. Only a state Lightning resumes exactly (tests/test_resume.py) is written:
    not during a validation, nor in an epoch's last step (resumed from there, the run would log every later
    metric a step late, or skip the rest of the next epoch); after a step that validated, the ``last``
    written at that validation is that step's state.
    """

    def __init__(self) -> None:
        self._validated_at: int | None = None  # the step whose validation ended last
        self._saved_at: int | None = None  # the step the newest checkpoint (by any callback) holds

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._saved_at = trainer.global_step

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._validated_at = trainer.global_step

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        if trainer.sanity_checking or trainer.fast_dev_run:
            return
        validated = self._validated_at == trainer.global_step  # its checkpoints were written at that validation
        if trainer.validating or (trainer.fit_loop.epoch_loop.batch_progress.is_last_batch and not validated):
            where = "during a validation" if trainer.validating else "in an epoch's last step"
            say(trainer, f"SIGTERM {where}: the state is not saved; --ckpt_path=last resumes from an earlier one")
            return
        savers = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.save_last]
        if not savers:
            say(trainer, "SIGTERM: no checkpoint callback keeps a last checkpoint (save_last): the state is not saved")
        for callback in savers:
            if validated and self._saved_at != trainer.global_step:
                say(
                    trainer,
                    f"SIGTERM: the state after step {trainer.global_step} is not saved ({type(callback).__name__} "
                    "wrote no last checkpoint at its validation); --ckpt_path=last resumes from an earlier one",
                )
                continue
            if not validated:
                write_last(callback, trainer)
            say(trainer, f"SIGTERM: saved the state after step {trainer.global_step} to {callback.last_model_path}")


def say(trainer: L.Trainer, line: str) -> None:
    if trainer.is_global_zero:
        print(line, file=sys.stderr)


# --------------------------------------------------------------------------- writing checkpoints


class NonFiniteCheckpoint(UserError):
    """A checkpoint was about to be written with NaN or infinite weights."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, writing atomically beside the target (Lightning's is not atomic),
    refusing diverged weights and keeping ``best.ckpt`` the best checkpoint the callbacks' state names."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        broken = [
            name
            for name, value in checkpoint.get("state_dict", {}).items()
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all())
        ]
        if broken:
            # The previous checkpoint stays: it is the last one whose weights were finite.
            step = checkpoint.get("global_step", "?")
            raise NonFiniteCheckpoint(
                f"the weights became non-finite (NaN or infinite, e.g. {broken[0]}) by step {step}; the run stops "
                f"and {str(path)!r} keeps its last good contents. "
                "Lower model.learning_rate or raise model.warmup_steps."
            )
        with atomic_write(path, "wb") as handle:
            torch.save(checkpoint, handle)
        keep_best_name(checkpoint, path)


def keep_best_name(checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
    """Make ``best.ckpt`` (a hard link, else a copy) the best checkpoint the callbacks' state names in ``path``'s
    folder, or ``path`` until a validation has scored one."""
    written = os.path.realpath(path)
    folder = os.path.dirname(written)
    for state in (checkpoint.get("callbacks") or {}).values():
        if not isinstance(state, dict) or "best_model_path" not in state:
            continue
        best = state.get("best_model_path") or ""
        if best and os.path.dirname(os.path.realpath(best)) == folder and os.path.isfile(best):
            source = best
        elif not best and state.get("dirpath") and os.path.realpath(str(state["dirpath"])) == folder:
            source = written
        else:
            continue
        target = os.path.join(folder, BEST_NAME)
        if not (os.path.exists(target) and os.path.samefile(source, target)):
            staged = os.path.join(folder, f".{BEST_NAME}.{os.getpid()}.link")
            try:
                os.link(source, staged)
            except OSError:  # a file system without hard links (or a leftover staged file: copied over)
                shutil.copyfile(source, staged)
            os.replace(staged, target)
        return


# --------------------------------------------------------------------------- random states


def _local_random_state() -> dict[str, Any]:
    """This process's global RNG states, as tensors and plain values (loadable with weights_only)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    version, python_state, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [str(kind), torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)],
        "python": [int(version), list(python_state), gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


class RandomState(Callback):
    """Keeps every process's global RNG state in checkpoints and restores it right before the next step
    of a resumed run, so that dropout draws as in an uninterrupted run."""

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] = []

    def state_dict(self) -> dict[str, Any]:
        local = _local_random_state()
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return {"ranks": [local]}
        gathered: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, local)
        return {"ranks": gathered}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = list(state_dict.get("ranks") or [])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_rank < len(self._pending):
            state = self._pending[trainer.global_rank]
            torch.set_rng_state(state["torch"])
            kind, keys, position, has_gauss, cached = state["numpy"]
            np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
            version, python_state, gauss = state["python"]
            random.setstate((version, tuple(python_state), gauss))
            cuda = state.get("cuda")
            if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(cuda)
        self._pending = []


# --------------------------------------------------------------------------- reading checkpoints


def read_checkpoint(path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
    """A run's checkpoint, or one ``UserError`` saying why the file is not one: missing, a folder,
    truncated or corrupt, pickled objects, a bare state dict (Lightning would fail with a ``KeyError``)."""
    file = Path(path).expanduser()
    if not file.exists():
        raise UserError(f"checkpoint {str(path)!r} does not exist")
    if file.is_dir():
        raise UserError(
            f"checkpoint {str(path)!r} is a directory; pass the .ckpt file (e.g. {str(file / 'last.ckpt')!r})"
        )
    try:
        contents = torch.load(file, map_location="cpu", weights_only=weights_only)
    except Exception as error:
        text = str(error)
        # torch's safe unpickler names a class it will not build "Unsupported global"; any other
        # failure of it (a text file, a truncated pickle) means the file is not a checkpoint at all.
        if weights_only and "Unsupported global" in text:
            raise UserError(
                f"checkpoint {str(path)!r} holds Python objects other than tensors and plain values, which "
                "tiedemb does not unpickle by default (it could run arbitrary code). If you trust the file, "
                "pass --weights_only=false."
            ) from None
        unpickler = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        reason = unpickler.group(1).strip() if unpickler else first_line(error).split(". ")[0].rstrip(".")
        raise UserError(
            f"checkpoint {str(path)!r} could not be read ({reason}); it is truncated, corrupt or not "
            "a Lightning checkpoint"
        ) from None
    if isinstance(contents, Mapping) and isinstance(contents.get("state_dict"), Mapping):
        return contents  # type: ignore[return-value]
    if isinstance(contents, Mapping) and contents and all(isinstance(v, torch.Tensor) for v in contents.values()):
        described = f"a bare state dict ({len(contents)} tensors such as {next(iter(contents))!r})"
        hint = "To start from transformers weights, pass the model's folder (with config.json) as model.pretrained; "
    else:
        described, hint = f"a {type(contents).__name__}", ""
    raise UserError(
        f"checkpoint {str(path)!r} holds {described}, not a checkpoint of a tiedemb run (the .ckpt file Lightning "
        f"writes, with state_dict and hyper_parameters). {hint}--ckpt_path continues or evaluates a run from the "
        "file it wrote (e.g. its checkpoints/last.ckpt)"
    )


def comparable(value: Any) -> Any:
    """A setting in a comparable form: tuples and lists alike, mappings as dicts."""
    if isinstance(value, (list, tuple)):
        return [comparable(item) for item in value]
    if isinstance(value, Mapping):
        return {key: comparable(item) for key, item in value.items()}
    return value


def differences(saved: Mapping[str, Any], current: Mapping[str, Any], ignore: Iterable[str]) -> dict[str, tuple]:
    """Settings both sides have that differ (one the checkpoint lacks predates the option: not compared)."""
    return {
        key: (saved[key], value)
        for key, value in current.items()
        if key in saved
        and key not in ignore
        and not key.startswith("_")
        and comparable(saved[key]) != comparable(value)
    }


def check_model_kind(path: str | os.PathLike, saved_class: str, wanted_class: str) -> None:
    """Raise a ``UserError`` if a checkpoint of ``saved_class`` is given where ``wanted_class`` runs."""
    saved, wanted = saved_class.rsplit(".", 1)[-1], wanted_class.rsplit(".", 1)[-1]
    if saved == wanted:
        return
    hints = {
        ("PretrainModule", "GlueModule"): (
            f"a pretraining checkpoint is where fine-tuning starts (fit --model.pretrained={path}); --ckpt_path "
            "takes a fine-tuning run's checkpoint"
        ),
        ("GlueModule", "PretrainModule"): (
            "a fine-tuned checkpoint is evaluated with its GLUE config (configs/glue/<task>.yaml)"
        ),
    }
    hint = hints.get((saved, wanted), "pass a checkpoint of this kind of model")
    raise UserError(f"checkpoint {str(path)!r} holds a {saved}, but the config's model is a {wanted}; {hint}")


def check_compatible(checkpoint: Mapping[str, Any], path: str | os.PathLike, model: L.LightningModule) -> None:
    """Refuse a checkpoint of another kind or size of model: settings other than optimisation and speed agree."""
    saved = checkpoint.get("hyper_parameters") or {}
    if saved.get("_class_path"):
        check_model_kind(path, saved["_class_path"], f"{type(model).__module__}.{type(model).__qualname__}")
    found = differences(saved, dict(model.hparams), EXCLUDED_FROM_IDENTITY | TRAINING_SETTINGS)
    if "vocab_size" in found and set(found) <= {"vocab_size", "pad_token_id"}:
        raise UserError(
            f"checkpoint {str(path)!r} has a vocabulary of {found['vocab_size'][0]} tokens, but the data's tokenizer "
            f"gives {found['vocab_size'][1]}: tokenizer and model vocabulary do not match. Use the tokenizer (and "
            "data.vocab_size) the checkpoint was trained with."
        )
    if found:
        described = "; ".join(f"model.{key}={old!r} there, {new!r} here" for key, (old, new) in found.items())
        raise UserError(
            f"checkpoint {str(path)!r} is of another model variant or size: {described}. "
            "Pass the config it was trained with, or a checkpoint of this model."
        )


# --------------------------------------------------------------------------- finding the last checkpoint


def last_checkpoints(roots: Iterable[str | os.PathLike]) -> list[Path]:
    """Every ``last*.ckpt`` under ``roots``, newest first."""
    found = {path.resolve() for root in roots for path in Path(root).expanduser().rglob("last*.ckpt") if path.is_file()}
    return sorted(found, key=lambda path: path.stat().st_mtime_ns, reverse=True)


def find_last_checkpoint(
    roots: Iterable[str | os.PathLike], model: L.LightningModule, datamodule: L.LightningDataModule | None
) -> Path | None:
    """The newest last checkpoint under ``roots`` written by a run with this model's and data's settings."""
    data = dict(datamodule.hparams) if datamodule is not None else {}
    for path in last_checkpoints(roots):
        try:
            checkpoint = read_checkpoint(path)
        except UserError as error:
            log.warning("skipping %s: %s", path, error)
            continue
        saved_model = checkpoint.get("hyper_parameters") or {}
        saved_data = checkpoint.get("datamodule_hyper_parameters") or {}
        saved_class = str(saved_model.get("_class_path", type(model).__qualname__)).rsplit(".", 1)[-1]
        # The vocabulary size is compared through the model; a checkpoint written before the data
        # recorded its resolved size holds null there for the same tokenizer.
        if (
            saved_class == type(model).__qualname__
            and not differences(saved_model, dict(model.hparams), EXCLUDED_FROM_IDENTITY)
            and not differences(saved_data, data, EXCLUDED_FROM_IDENTITY | {"vocab_size"})
        ):
            return path
    return None
