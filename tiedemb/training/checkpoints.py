"""A run's checkpoints: written crash-safe, ``last`` the newest state, random states in them; the one a
run starts from found (``--ckpt_path=last``), read and vetted, a bad one reported as one ``UserError``.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import lightning as L
import numpy as np
import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn

from tiedemb.errors import UserError, first_line
from tiedemb.options import class_parameters
from tiedemb.training.files import atomic_write
from tiedemb.training.run_dir import BEST_NAME

log = logging.getLogger("tiedemb")

LAST_NAME = re.compile(r"^last(-v?\d+)?\.ckpt$")
"""File names ``ModelCheckpoint(save_last=True)`` writes (``last.ckpt``, ``last-v1.ckpt``)."""

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
    """``ModelCheckpoint`` whose ``last`` is the newest state at every validation and at the end of a fit.

    Lightning refreshes ``last`` after a validation only when the monitored metric improved; a run
    resumed from a lagging ``last`` would repeat steps."""

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
    """Write ``callback``'s ``last`` checkpoint now; the path written (``last_model_path``, set first so
    that the checkpoint names it)."""
    metrics = {**trainer.callback_metrics, "epoch": trainer.current_epoch, "step": trainer.global_step}
    path = callback.last_model_path or callback.format_checkpoint_name(metrics, callback.CHECKPOINT_NAME_LAST)
    callback.last_model_path = path
    trainer.save_checkpoint(path, callback.save_weights_only)
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.after_save_checkpoint(callback)
    return path


# --------------------------------------------------------------------------- writing checkpoints


class NonFiniteCheckpoint(UserError):
    """A checkpoint was about to be written with NaN or infinite weights."""


def non_finite_tensors(state_dict: dict[str, Any]) -> list[str]:
    """Names of floating-point tensors in ``state_dict`` holding NaN or infinity."""
    return [
        name
        for name, value in state_dict.items()
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all())
    ]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, writing beside the target and renaming (Lightning's stages the file in
    the system temporary folder: not atomic across file systems), refusing diverged weights and keeping
    ``best.ckpt`` the best checkpoint the callbacks' state names."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        broken = non_finite_tensors(checkpoint.get("state_dict", {}))
        if broken:
            # The previous checkpoint stays: it is the last one whose weights were finite.
            step = checkpoint.get("global_step", "?")
            raise NonFiniteCheckpoint(
                f"the weights became non-finite (NaN or infinite, e.g. {broken[0]}) by step {step}; the run stops "
                f"and {str(path)!r} keeps its last good contents. "
                "Lower model.learning_rate or raise model.warmup_steps."
            )
        save_atomically(checkpoint, path)
        keep_best_name(checkpoint, path)


def keep_best_name(checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
    """Make ``best.ckpt`` in ``path``'s folder the best checkpoint the callbacks' state names there (the
    file just written until a validation has scored one): a hard link, else a copy, replaced atomically."""
    written = os.path.realpath(path)
    folder = os.path.dirname(written)
    for state in (checkpoint.get("callbacks") or {}).values():
        if not isinstance(state, dict) or "best_model_path" not in state:
            continue
        best = state.get("best_model_path") or ""
        if best and os.path.dirname(os.path.realpath(best)) == folder and os.path.isfile(best):
            _link(best, os.path.join(folder, BEST_NAME))
            return
        if not best and state.get("dirpath") and os.path.realpath(str(state["dirpath"])) == folder:
            _link(written, os.path.join(folder, BEST_NAME))
            return


def _link(source: str, target: str) -> None:
    if os.path.realpath(source) == target or (os.path.exists(target) and os.path.samefile(source, target)):
        return
    staged = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.link")
    try:
        os.link(source, staged)
    except OSError:  # a file system without hard links (or a leftover staged file: copied over)
        shutil.copyfile(source, staged)
    os.replace(staged, target)


def save_atomically(obj: Any, path: str | os.PathLike, save: Callable[[Any, IO], None] | None = None) -> None:
    """``torch.save(obj, path)`` (or ``save(obj, file)``), but ``path`` only ever holds a complete file."""
    with atomic_write(path, "wb") as handle:
        (save or torch.save)(obj, handle)


def _is_local(path: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(get_filesystem(str(path)), LocalFileSystem)


# --------------------------------------------------------------------------- random states


def _local_random_state() -> dict[str, Any]:
    """This process's global RNG states, as tensors and plain values (loadable with weights_only)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    version, python_state, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [
            str(kind),
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(position),
            int(has_gauss),
            float(cached),
        ],
        "python": [int(version), list(python_state), gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_local_random_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    version, python_state, gauss = state["python"]
    random.setstate((version, tuple(python_state), gauss))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


class RandomState(Callback):
    """Keeps every process's global RNG state in checkpoints and restores it when training resumes
    (right before the next step), so that dropout draws as in an uninterrupted run."""

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] | None = None

    def state_dict(self) -> dict[str, Any]:
        local = _local_random_state()
        if (
            torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        ):
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, local)
            return {"ranks": gathered}
        return {"ranks": [local]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = list(state_dict.get("ranks") or []) or None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending is None:
            return
        rank = trainer.global_rank
        if rank < len(self._pending):
            _set_local_random_state(self._pending[rank])
        else:
            log.warning(
                "the checkpoint holds random states of %d processes, this run has %d: process %d re-seeds",
                len(self._pending),
                trainer.world_size,
                rank,
            )
        self._pending = None


# --------------------------------------------------------------------------- reading checkpoints


RUN_CHECKPOINT = "a checkpoint of a tiedemb run (the .ckpt file Lightning writes, with state_dict and hyper_parameters)"


def check_run_checkpoint(contents: Any, path: str | os.PathLike) -> dict[str, Any]:
    """``contents`` if it is a run's checkpoint, else one ``UserError`` saying what the file is instead."""
    if isinstance(contents, Mapping) and isinstance(contents.get("state_dict"), Mapping):
        return contents  # type: ignore[return-value]
    if isinstance(contents, Mapping) and contents and all(isinstance(v, torch.Tensor) for v in contents.values()):
        described = f"a bare state dict ({len(contents)} tensors such as {next(iter(contents))!r})"
        hint = "To start from transformers weights, pass the model's folder (with config.json) as model.pretrained; "
    else:
        described = f"a {type(contents).__name__}"
        hint = ""
    raise UserError(
        f"checkpoint {str(path)!r} holds {described}, not {RUN_CHECKPOINT}. {hint}"
        "--ckpt_path continues or evaluates a run from the file it wrote (e.g. its checkpoints/last.ckpt)"
    )


def read_checkpoint(path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
    """Load a run's checkpoint or explain why not (Lightning would fail on a bare state dict with a ``KeyError``)."""
    return check_run_checkpoint(load_checkpoint_file(path, weights_only), path)


def load_checkpoint_file(path: str | os.PathLike, weights_only: bool = True) -> Any:
    """What a checkpoint file holds (tensors memory-mapped where possible), or a ``UserError`` saying
    why it cannot be read: missing, a folder, truncated or corrupt, or pickled objects."""
    file = Path(path).expanduser()
    if not file.exists():
        raise UserError(f"checkpoint {str(path)!r} does not exist")
    if file.is_dir():
        raise UserError(
            f"checkpoint {str(path)!r} is a directory; pass the .ckpt file (e.g. {str(file / 'last.ckpt')!r})"
        )
    try:
        try:
            contents = torch.load(file, map_location="cpu", weights_only=weights_only, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
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
    return contents


def comparable(value: Any) -> Any:
    """A setting in a comparable form: tuples and lists alike, mappings as dicts."""
    if isinstance(value, (list, tuple)):
        return [comparable(item) for item in value]
    if isinstance(value, Mapping):
        return {key: comparable(item) for key, item in value.items()}
    return value


_MISSING = object()


def _signature_defaults(cls: type) -> dict[str, Any]:
    try:
        parameters = class_parameters(cls).values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _differences(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    ignore: Iterable[str],
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, tuple[Any, Any]]:
    """Settings that differ between a checkpoint's hyperparameters and the current ones: one the checkpoint
    lacks (it predates the option) is equal at its default; one the class no longer has is ignored."""
    ignored, defaults = set(ignore), defaults or {}
    differences = {}
    for key in dict.fromkeys([*saved, *current]):
        if key in ignored or key.startswith("_") or key not in current:
            continue
        old = saved.get(key, _MISSING)
        if old is _MISSING:
            if key in defaults and comparable(current[key]) == comparable(defaults[key]):
                continue
            old = None
        if comparable(old) != comparable(current[key]):
            differences[key] = (old, current[key])
    return differences


def _describe(differences: Mapping[str, tuple[Any, Any]], prefix: str, limit: int = 4) -> str:
    shown = [
        f"{prefix}{key}={saved!r} there, {current!r} here"
        for key, (saved, current) in list(differences.items())[:limit]
    ]
    more = len(differences) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


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
    """Raise a ``UserError`` if ``checkpoint`` was written by another kind or size of model: its settings
    other than optimisation and speed must agree."""
    saved = checkpoint.get("hyper_parameters") or {}
    current = dict(model.hparams)
    saved_class = saved.get("_class_path")
    if saved_class:
        check_model_kind(path, saved_class, f"{type(model).__module__}.{type(model).__qualname__}")
    differences = (
        _differences(saved, current, EXCLUDED_FROM_IDENTITY | TRAINING_SETTINGS, _signature_defaults(type(model)))
        if saved
        else {}
    )
    vocab = differences.get("vocab_size")
    if vocab is not None and set(differences) <= {"vocab_size", "pad_token_id"}:
        raise UserError(
            f"checkpoint {str(path)!r} has a vocabulary of {vocab[0]} tokens, but the data's tokenizer gives "
            f"{vocab[1]}: tokenizer and model vocabulary do not match. Use the tokenizer (and data.vocab_size) the "
            "checkpoint was trained with."
        )
    if differences:
        raise UserError(
            f"checkpoint {str(path)!r} is of another model variant or size: {_describe(differences, 'model.')}. "
            "Pass the config it was trained with, or a checkpoint of this model."
        )


# --------------------------------------------------------------------------- finding the last checkpoint


def last_checkpoints(roots: Iterable[str | os.PathLike]) -> list[Path]:
    """Every ``last*.ckpt`` under ``roots``, newest first."""
    found: set[Path] = set()
    for root in roots:
        folder = Path(root).expanduser()
        if folder.is_dir():
            found.update(
                path.resolve() for path in folder.rglob("*.ckpt") if LAST_NAME.match(path.name) and path.is_file()
            )
    return sorted(found, key=lambda path: path.stat().st_mtime_ns, reverse=True)


def same_run_configuration(
    checkpoint: Mapping[str, Any], model: L.LightningModule, datamodule: L.LightningDataModule | None
) -> bool:
    """Whether ``checkpoint`` was written by a run with this model's and data's settings."""
    saved_model = checkpoint.get("hyper_parameters") or {}
    saved_class = str(saved_model.get("_class_path", ""))
    if saved_class and saved_class.rsplit(".", 1)[-1] != type(model).__qualname__:
        return False
    if _differences(saved_model, dict(model.hparams), EXCLUDED_FROM_IDENTITY, _signature_defaults(type(model))):
        return False
    if datamodule is not None and datamodule.hparams:
        saved_data = checkpoint.get("datamodule_hyper_parameters") or {}
        # The vocabulary size is compared through the model above; a checkpoint written before the
        # data recorded its resolved size holds null there for the same tokenizer.
        if _differences(
            saved_data,
            dict(datamodule.hparams),
            EXCLUDED_FROM_IDENTITY | {"vocab_size"},
            _signature_defaults(type(datamodule)),
        ):
            return False
    return True


def find_last_checkpoint(
    roots: Iterable[str | os.PathLike], model: L.LightningModule, datamodule: L.LightningDataModule | None
) -> Path | None:
    """The newest last checkpoint under ``roots`` of a run configured like this one."""
    for path in last_checkpoints(roots):
        try:
            checkpoint = read_checkpoint(path)
        except UserError as error:
            log.warning("skipping %s: %s", path, error)
            continue
        if same_run_configuration(checkpoint, model, datamodule):
            return path
    return None
