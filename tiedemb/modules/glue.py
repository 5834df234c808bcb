"""GlueModule: fine-tune the pretraining embedding and encoder on a GLUE classification task.

GLUE's metric names: ``val/accuracy`` and ``val/f1`` (positive class) for MRPC; a split's suffix comes
from its name (``validation_matched`` -> ``val/accuracy_matched``), so several dev splits need no code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torchmetrics import MeanMetric, Metric, MetricCollection
from torchmetrics.classification import BinaryF1Score, MulticlassAccuracy

from tiedemb.data.glue_tasks import TASKS, GlueTask
from tiedemb.errors import UserError, check_choice
from tiedemb.modules.base import TransformerModule
from tiedemb.modules.optim import LrDecay, check_schedule
from tiedemb.modules.throughput import MatmulWeights
from tiedemb.nn.classifier import SequenceClassifier
from tiedemb.nn.config import ARCHITECTURE, TRAINING, TransformerConfig
from tiedemb.options import (
    AtLeastTwo,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    Rate,
    UnitFraction,
    changed_from_default,
    no_effect,
    warn_no_effect,
)
from tiedemb.training.files import write_tsv
from tiedemb.training.metric_names import MAJORITY_PREFIX, eval_name, kept_name
from tiedemb.weights.narrow import PROJECTION, TABLES, fit_embedding
from tiedemb.weights.source import PretrainedWeights, load_pretrained, resolve_architecture

#: Metrics per task, the main one first (it decides convergence and should decide checkpoints).
TASK_METRICS: dict[str, tuple[str, ...]] = {"mrpc": ("accuracy", "f1")}
CONVERGED_FRACTION = 0.99
"""A run has converged once the main dev metric reaches this fraction of its best value."""


def metric_names(task: str | None) -> tuple[str, ...]:
    return TASK_METRICS.get(task or "", ("accuracy",))


def build_metric(name: str, num_labels: int) -> Metric:
    """A metric of predicted and true class ids; f1 is the positive class's."""
    return BinaryF1Score() if name == "f1" else MulticlassAccuracy(num_classes=num_labels, average="micro")


def majority_scores(
    task: str | None, num_labels: int, train_labels: Sequence[int], dev_labels: dict[str, Sequence[int]]
) -> dict[str, float]:
    """Each dev metric of always answering the most frequent training label (ties: the lowest id), the
    floor a fine-tuned score is read against; ``dev_labels`` maps a dev split's name to its labels."""
    counts = torch.bincount(torch.as_tensor(list(train_labels), dtype=torch.long), minlength=num_labels)
    majority = int(torch.argmax(counts))
    scores = {}
    for split, labels in dev_labels.items():
        target = torch.as_tensor(list(labels), dtype=torch.long)
        for name in metric_names(task):
            metric = build_metric(name, num_labels)
            metric.update(torch.full_like(target, majority), target)
            scores[f"{MAJORITY_PREFIX}{name}{split_suffix(split)}"] = float(metric.compute())
    return scores


def split_suffix(split: str) -> str:
    """``validation`` -> ``""``, ``validation_matched`` -> ``"_matched"``."""
    return split.removeprefix("validation")


def epochs_to_converge(history: Sequence[tuple[float, float]], fraction: float = CONVERGED_FRACTION) -> float | None:
    """The first (fractional) epoch whose metric reaches ``fraction`` of the run's best.

    ``history`` is (epoch, value) in training order.
    """
    if not history:
        return None
    target = fraction * max(value for _, value in history)
    return next(epoch for epoch, value in history if value >= target)


WARMUP_RATIO = 0.1
"""BERT's fine-tuning warmup, a tenth of the steps; ``warmup_steps``, when given, replaces it."""


def _check_vocabulary(vocab_size: int | None, source: PretrainedWeights) -> None:
    """Refuse data whose tokenizer is not the one a pretraining checkpoint was trained with, naming
    that one (a trained tokenizer's folder is named by a hash nobody could guess)."""
    have = source.fields.get("vocab_size")
    if vocab_size is None or have is None or vocab_size == have or source.kind != "checkpoint":
        return  # agreeing, or left to resolve_architecture's message
    from tiedemb.data.tokenizers import tokenizer_of_run

    used = tokenizer_of_run(source.data, have, str(source.data.get("objective") or "mlm"))
    if used is not None:
        raise UserError(
            f"the data's tokenizer has {vocab_size} tokens, but the pretrained checkpoint "
            f"{source.origin!r} has a vocabulary of {have}; it was pretrained with the tokenizer "
            f"{used!r}: pass --data.tokenizer={used}"
        )


def majority_floor(data: Any) -> dict[str, float] | None:
    """``majority_scores`` of ``data``, named ``data/majority/...``; ``None`` unless ``data`` is a GLUE
    task (``GlueData``, not imported here: it brings ``datasets``)."""
    if not hasattr(data, "raw_split"):
        return None
    dev = {split: data.raw_split(split)["label"] for split in data.val_split_names}
    return majority_scores(data.task_spec.name, data.num_labels, data.raw_split("train")["label"], dev)


def write_predictions(directory: Path, filename: str, task: GlueTask | None, rows: Iterable[tuple[int, ...]]) -> Path:
    """A GLUE-style TSV of ``(index, prediction[, label])`` rows, labels spelled as the task's classic
    files spell them (MRPC 0/1, MNLI names)."""
    values = task.classic.label_values if task is not None else None

    def spell(label: int) -> Any:
        return values[label] if values is not None and 0 <= label < len(values) else label

    rows = [(index, *map(spell, labels)) for index, *labels in rows]
    header = ["index", "prediction", "label"][: len(rows[0]) if rows else 2]
    return write_tsv(directory, filename, header, rows)


class GlueModule(TransformerModule):
    """Embedding -> Encoder -> [CLS] (-> pooler) -> dropout -> classifier, fine-tuned on one task."""

    def __init__(
        self,
        *,
        num_labels: AtLeastTwo | None = None,
        task: str | None = None,
        pretrained: str | None = None,
        reinit_embeddings: bool = False,
        narrowing: Literal["balanced", "energy"] = "balanced",
        pooler: bool = True,
        classifier_dropout: Rate | None = None,
        learning_rate: NonNegativeFloat = 2e-5,
        weight_decay: NonNegativeFloat = 0.01,
        betas: tuple[Rate, Rate] = (0.9, 0.999),
        eps: PositiveFloat = 1e-8,
        warmup_ratio: Rate = WARMUP_RATIO,
        warmup_steps: NonNegativeInt | None = None,
        lr_decay: LrDecay = "linear",
        min_lr_ratio: UnitFraction = 0.0,
        predictions_dir: str | None = None,
        write_test_predictions: bool = True,
        **kwargs: Any,
    ) -> None:
        """The fine-tuning settings; the architecture and training settings are ``TransformerModule``'s,
        passed on in ``kwargs``.

        Args:
            num_labels: The classifier's outputs; the command line takes it from data.task.
            task: The GLUE task (its metrics and file names); the command line takes it from data.task.
            pretrained: Where the embedding and encoder start: a tiedemb ``.ckpt``, a transformers BERT folder
                or hub name, or ``None`` (random).
            reinit_embeddings: Draw the embedding tables and projection afresh instead of the pretrained ones.
            narrowing: How an embedding narrower than the pretrained one is chosen: ``balanced`` (each table's
                energy counts equally) or ``energy`` (a plain truncated SVD). Logged as ``narrow/kept_*``.
            pooler: BERT's dense + tanh on [CLS] before the classifier.
            classifier_dropout: Dropout before the classifier. Unset: model.dropout.
            learning_rate: AdamW's peak learning rate, reached at the end of warmup.
            weight_decay: AdamW's decoupled weight decay, on weight matrices only (not biases or norm gains).
            betas: AdamW's moment decay rates (beta1, beta2).
            eps: AdamW's epsilon, added to the root of the second moment.
            warmup_ratio: warmup as a fraction of all optimiser steps; ``warmup_steps`` overrides it.
            warmup_steps: Optimiser steps of linear warmup from 0 to learning_rate. Unset: warmup_ratio.
            lr_decay: How the learning rate falls after warmup, to min_lr_ratio of its peak at the last step.
            min_lr_ratio: The learning rate at the last step, as a fraction of its peak (not with constant).
            predictions_dir: where ``predict`` and ``test`` write TSV files; default the run's folder.
            write_test_predictions: ``test`` also writes each dev split's predictions with the gold label.
        """
        super().__init__(**kwargs)
        self.task_spec: GlueTask | None = TASKS[check_choice("model.task", task, TASKS)] if task is not None else None
        num_labels = self._resolve_num_labels(num_labels)
        check_schedule(lr_decay, min_lr_ratio)
        if reinit_embeddings and pretrained is None:
            raise no_effect(
                "model.reinit_embeddings", True, "without model.pretrained: the embeddings are drawn afresh anyway"
            )
        if warmup_steps is not None and changed_from_default(warmup_ratio, WARMUP_RATIO):
            raise no_effect(
                "model.warmup_ratio",
                warmup_ratio,
                f"with model.warmup_steps={warmup_steps}, which overrides it; give one of them",
            )
        settings = self.transformer_settings
        source = load_pretrained(pretrained) if pretrained is not None and self.reads_pretrained else None
        if source is not None:
            _check_vocabulary(settings["vocab_size"], source)
        architecture = resolve_architecture(
            {name: settings[name] for name in TransformerConfig.field_names_of(ARCHITECTURE)}, source
        )
        # Checkpoints carry concrete values, so a reload rebuilds the same shapes without the source.
        self.hparams.update(architecture, num_labels=num_labels)
        training = {name: settings[name] for name in TransformerConfig.field_names_of(TRAINING)}
        self.config = TransformerConfig(objective="mlm", **training, **architecture)
        self.model = SequenceClassifier(self.config, num_labels, pooler=pooler, classifier_dropout=classifier_dropout)
        if narrowing != "balanced" and pretrained is None:
            raise no_effect(
                "model.narrowing", narrowing, "without model.pretrained: there is no pretrained embedding to narrow"
            )
        self.narrowing_kept: dict[str, float] = {}  # table -> share of its energy kept by narrowing
        if source is not None:
            self._load_source(source, reinit_embeddings, narrowing)
        self.matmul_weights = MatmulWeights.of(self.model)
        self.eval_metrics = nn.ModuleDict()
        self.eval_losses = nn.ModuleDict()
        self._eval_splits: list[str] = []
        self._rows: dict[str, list[tuple[int, int, int]]] = {}  # split -> (idx, prediction, label)
        self.history: list[tuple[float, float]] = []  # (fractional epoch, main dev metric) during fit
        self.epochs_to_converge: float | None = None
        self.written_files: list[Path] = []  # every TSV this module wrote, in order

    def _resolve_num_labels(self, num_labels: int | None) -> int:
        expected = self.task_spec.num_labels if self.task_spec is not None else None
        if num_labels is None and expected is None:
            raise UserError("model.num_labels must be set when model.task is not (the CLI links both from data.task)")
        if num_labels is not None and expected is not None and num_labels != expected:
            raise UserError(
                f"model.num_labels={num_labels} disagrees with task {self.task_spec.name!r}, which has {expected}"
            )
        return num_labels if num_labels is not None else expected

    @torch.no_grad()
    def _load_source(self, source: PretrainedWeights, reinit_embeddings: bool, narrowing: str) -> None:
        state = fit_embedding(source, self.config.embedding_dim, reinit_embeddings, narrowing, kept=self.narrowing_kept)
        if narrowing != "balanced" and not self.narrowing_kept:
            warn_no_effect(
                "model.narrowing",
                narrowing,
                "here: the pretrained embedding is not narrowed "
                "(model.embedding_dim is its width, or model.reinit_embeddings draws new tables)",
            )
        if self.narrowing_kept:
            kept = ", ".join(f"{name} {share:.1%}" for name, share in self.narrowing_kept.items())
            rank_zero_info(
                f"narrowed the pretrained embedding to d_e = {self.config.embedding_dim} ({narrowing}): "
                f"energy kept {kept}"
            )
        if self.model.pooler is None:
            state = {key: value for key, value in state.items() if not key.startswith("pooler.")}
        fresh = {PROJECTION, *TABLES} if reinit_embeddings else set()
        source.load_into(self.model, state, lambda key: key.startswith(("pooler.", "classifier.")) or key in fresh)
        rank_zero_info(f"loaded the embedding and encoder from {source.kind} {source.origin!r}")

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        """``SequenceClassifier.forward``: class logits (B, num_labels)."""
        return self.model(*args, **kwargs)

    def _logits(self, batch: dict[str, Tensor]) -> Tensor:
        # Only the [CLS] row of each sequence reaches the last block's tail, pooler and classifier.
        self.count_flops(batch["input_ids"], output_positions=len(batch["input_ids"]))
        return self(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"))

    def on_train_start(self) -> None:
        if self.global_step != 0:
            return  # a resumed run logged these at its start
        # What narrowing kept, and the scores of always answering the most frequent label.
        described = {kept_name(name): share for name, share in self.narrowing_kept.items()}
        described.update(majority_floor(getattr(self.trainer, "datamodule", None)) or {})
        if described:
            for logger in self.loggers:
                logger.log_metrics(described, step=0)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        # Metric and file names follow the data's task (the command line links model.task to it).
        self.task_spec = self.task_spec or getattr(datamodule, "task_spec", None)
        if stage == "predict":
            return
        splits = getattr(datamodule, "val_split_names", None)
        if splits is None:
            splits = list(self.task_spec.validation_splits) if self.task_spec is not None else ["validation"]
        self._eval_splits = list(splits)
        num_labels = self.hparams.num_labels
        names = metric_names(self.task_spec.name if self.task_spec else None)
        self.eval_metrics = nn.ModuleDict(
            {split: MetricCollection({name: build_metric(name, num_labels) for name in names}) for split in splits}
        )
        self.eval_losses = nn.ModuleDict({split: MeanMetric() for split in splits})

    @property
    def main_metric(self) -> str:
        """The dev metric that decides convergence (and that GLUE configs checkpoint on)."""
        names = metric_names(self.task_spec.name if self.task_spec else None)
        first = self._eval_splits[0] if self._eval_splits else "validation"
        return eval_name("val", names[0], split_suffix(first))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self._logits(batch).float(), batch["labels"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, dataloader_idx, keep_rows=False)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, dataloader_idx, keep_rows=bool(self.hparams.write_test_predictions))

    def _eval_step(self, batch: dict[str, Tensor], dataloader_idx: int, keep_rows: bool) -> None:
        split = self._eval_splits[dataloader_idx]
        logits = self._logits(batch)
        labels = batch["labels"]
        predictions = logits.argmax(dim=-1)
        self.eval_losses[split].update(F.cross_entropy(logits.float(), labels), weight=labels.numel())
        self.eval_metrics[split].update(predictions, labels)
        if keep_rows:
            self._keep(split, batch["idx"], predictions, labels)

    def on_validation_epoch_end(self) -> None:
        values = self._log_eval("val")
        if self.trainer.sanity_checking or self.trainer.state.fn != "fit" or self.main_metric not in values:
            return
        epoch = self.global_step * self.trainer.accumulate_grad_batches / self.trainer.num_training_batches
        self.history.append((epoch, values[self.main_metric]))

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")
        if self.hparams.write_test_predictions:
            folder = self.task_spec.classic.folder if self.task_spec else "predictions"
            self._write_rows({split: f"{folder}-{split}.tsv" for split in self._eval_splits}, with_labels=True)

    def _log_eval(self, stage: str) -> dict[str, float]:
        """Compute, log and reset each evaluated split's metrics; return the ``val/``-named values."""
        logged: dict[str, float] = {}
        total, count = 0.0, 0.0
        for split in self._eval_splits:
            metrics, loss = self.eval_metrics[split], self.eval_losses[split]
            if loss.update_count:
                suffix = split_suffix(split)
                for name, value in metrics.compute().items():
                    self.log(
                        eval_name(stage, name, suffix),
                        value,
                        add_dataloader_idx=False,
                        prog_bar=eval_name("val", name, suffix) == self.main_metric,
                    )
                    logged[eval_name("val", name, suffix)] = float(value)
                mean = loss.compute()
                total, count = total + float(mean) * float(loss.weight), count + float(loss.weight)
                if suffix:
                    self.log(f"{stage}/loss{suffix}", mean, add_dataloader_idx=False)
            metrics.reset()
            loss.reset()
        if count:
            # Over all evaluated examples: lets a loss-monitoring checkpoint work for every task.
            self.log(f"{stage}/loss", total / count, add_dataloader_idx=False)
        return logged

    def on_train_end(self) -> None:
        self.epochs_to_converge = epochs_to_converge(self.history)
        if self.epochs_to_converge is None:
            return
        name = "val/epochs_to_converge"
        # self.log is not allowed after training; loggers and callback_metrics take it directly.
        self.trainer.callback_metrics[name] = torch.tensor(self.epochs_to_converge)
        for logger in self.loggers:
            logger.log_metrics({name: self.epochs_to_converge}, step=self.global_step)
        rank_zero_info(f"{name}={self.epochs_to_converge:.2f}: {self.main_metric} first within 99% of its best")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["glue_history"] = list(self.history)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.history = [tuple(entry) for entry in checkpoint.get("glue_history", [])]

    def on_predict_start(self) -> None:
        self._rows = {}

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        predictions = self._logits(batch).argmax(dim=-1)
        self._keep(self._predict_splits()[dataloader_idx], batch["idx"], predictions, batch.get("labels"))
        return predictions

    def on_predict_epoch_end(self) -> None:
        splits = self._predict_splits()
        files = self.task_spec.submission_files if self.task_spec is not None else {}
        self._write_rows({split: files.get(split, f"{split}.tsv") for split in splits}, with_labels=False)

    def _predict_splits(self) -> list[str]:
        datamodule = getattr(self.trainer, "datamodule", None)
        names = getattr(datamodule, "predict_split_names", None)
        if names is not None:
            return list(names)
        return list(self.task_spec.test_splits) if self.task_spec is not None else ["test"]

    def _keep(self, split: str, idx: Tensor, predictions: Tensor, labels: Tensor | None) -> None:
        labels = labels if labels is not None else torch.full_like(predictions, -1)
        rows = zip(idx.tolist(), predictions.tolist(), labels.tolist())
        self._rows.setdefault(split, []).extend(rows)

    def _write_rows(self, filenames: dict[str, str], with_labels: bool) -> None:
        """Write each split's kept rows (sorted by example index) as a GLUE-style TSV."""
        gathered = {split: self._gather(self._rows.get(split, [])) for split in filenames}
        self._rows = {}
        if self.global_rank != 0:
            return
        directory = self._output_dir()
        for split, filename in filenames.items():
            rows = [row if with_labels else row[:2] for row in sorted(gathered[split])]
            if not rows:
                continue
            path = write_predictions(directory, filename, self.task_spec, rows)
            rank_zero_info(f"wrote {len(rows)} predictions for {split} to {path}")
            self.written_files.append(path)

    def _gather(self, rows: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """All processes' rows, each example once (distributed samplers repeat a few)."""
        if self.trainer.world_size == 1 or not torch.distributed.is_initialized():
            return rows
        everyone: list[Any] = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(everyone, rows)
        return list({row[0]: row for part in everyone for row in part}.values())

    def _output_dir(self) -> Path:
        # The run's folder (tiedemb.training.run_dir) unless predictions_dir says otherwise.
        return Path(self.hparams.predictions_dir or self.trainer.default_root_dir).expanduser()
