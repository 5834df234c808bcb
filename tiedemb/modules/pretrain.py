"""PretrainModule: the LightningModule that pretrains a ``Transformer`` with MLM or CLM."""

from __future__ import annotations

import math
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torchmetrics import MeanMetric

from tiedemb.errors import UserError
from tiedemb.modules.base import TransformerModule
from tiedemb.modules.optim import LrDecay, check_schedule
from tiedemb.modules.throughput import MatmulWeights
from tiedemb.nn import HEADS, LMOutput, Transformer, TransformerConfig
from tiedemb.nn.config import HeadActivation, Objective, Shuffle
from tiedemb.options import (
    AtLeastTwo,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    Rate,
    UnitFraction,
    changed_from_default,
    no_effect,
)
from tiedemb.theory import predict_for_config
from tiedemb.training import metric_names
from tiedemb.training.metric_names import LOG_N
from tiedemb.training.ties import TieGuard, restore_tied_entries, tied_prefixes_of
from tiedemb.weights.bert import encoder_problem, masked_lm_head_problem
from tiedemb.weights.source import PretrainedWeights, load_pretrained, resolve_architecture

# The command line offers the heads registered at import; from Python the registry takes later ones too.
HeadName = Literal[tuple(HEADS)]


class TrainingDiverged(UserError):
    """The loss stopped being a finite number."""


def refuse_unread_with_source(settings: dict[str, Any], source: PretrainedWeights) -> None:
    """Refuse initialisation settings that the pretrained weights replace before anything reads them."""
    origin = f"with model.pretrained={source.origin!r}"
    default_std = TransformerConfig.__dataclass_fields__["init_std"].default
    fresh_untied = not source.has_head and settings.get("head") == "untied"  # the one matrix init_std draws
    unread = {
        "embedding_init_std": (settings.get("embedding_init_std") is not None, "the token table is the pretrained one"),
        "head": (
            settings.get("head") == "tied_scaled_init",
            "its scaled draw of the shared table is replaced by the pretrained table; use model.head=tied",
        ),
        "init_std": (
            changed_from_default(settings.get("init_std"), default_std) and not fresh_untied,
            "every weight it would draw comes from the pretrained model (only a fresh untied head draws from it)",
        ),
    }
    for name, (refused, why) in unread.items():
        if refused:
            raise no_effect(f"model.{name}", settings[name], f"{origin}: {why}")


def check_trainable(config: TransformerConfig, source: PretrainedWeights) -> None:
    """Refuse settings under which the model would not compute what the pretrained BERT computes
    (the checks ``python -m tiedemb.export`` makes on the way out)."""
    problem = encoder_problem(config)
    if problem is None and source.has_head:
        problem = masked_lm_head_problem(config)
    if problem is not None:
        raise UserError(f"the pretrained {source.kind} {source.origin!r} cannot be trained with {problem}")


class PretrainModule(TransformerModule):
    """Embedding -> Encoder -> OutputHead, trained on masked or causal language modelling.

    Hyperparameters are plain values, so ``load_from_checkpoint(path)`` rebuilds any variant on its
    own; ``pretrained`` BERT weights decide the settings left unset (``tiedemb.weights.source``).
    """

    def __init__(
        self,
        *,
        objective: Objective = "mlm",
        head: HeadName | None = None,
        output_bias: bool | None = None,
        head_bias: bool | None = None,
        head_activation: HeadActivation | None = None,
        head_norm: bool | None = None,
        shuffle: Shuffle = "half_swap",
        shuffle_groups: AtLeastTwo = 2,
        embedding_scale: PositiveFloat | str = 1.0,
        output_scale: PositiveFloat | str = 1.0,
        embedding_init_std: PositiveFloat | None = None,
        learning_rate: NonNegativeFloat = 5e-4,
        weight_decay: NonNegativeFloat = 0.01,
        betas: tuple[Rate, Rate] = (0.9, 0.98),
        eps: PositiveFloat = 1e-6,
        warmup_steps: NonNegativeInt = 100,
        lr_decay: LrDecay = "linear",
        min_lr_ratio: UnitFraction = 0.0,
        compile: bool = False,
        peak_flops: PositiveFloat | None = None,
        pretrained: str | None = None,
        **kwargs: Any,
    ) -> None:
        """The language model's settings (``TransformerConfig`` fields) and the run's; the
        architecture and training settings are ``TransformerModule``'s, passed on in ``kwargs``.

        Args:
            objective: mlm (masked tokens) or clm (next token, causal attention).
            head: Output layer: untied, tied, tied_scaled_init, tied_orth, untied_orth, tied_shuffle, or any head
                registered in tiedemb.nn.heads.HEADS. Unset: the pretrained model's, else 'tied'.
            output_bias: A vocabulary-sized output bias, never tied. Unset: the pretrained model's, else False.
            head_bias: tied_orth/untied_orth: a bias on the projection. Unset: the pretrained model's, else False.
            head_activation: tied_orth/untied_orth: an activation after the projection. Unset: the pretrained
                model's, else 'none'.
            head_norm: tied_orth/untied_orth: a norm after the projection. Unset: the pretrained model's, else False.
            shuffle: tied_shuffle: half_swap, or channel_shuffle in shuffle_groups groups.
            shuffle_groups: tied_shuffle with channel_shuffle: groups; must divide d_e.
            embedding_scale: Token vectors x this: a number, sqrt_d (Gemma), rsqrt_d or mup:<base_width>.
            output_scale: What meets the output matrix x this: a number, rsqrt_d (T5), mup:<base_width> or sqrt_d.
            embedding_init_std: Std of the token table (T5: 1.0); unset: init_std.
            learning_rate: AdamW's peak learning rate, reached at the end of warmup.
            weight_decay: AdamW's decoupled weight decay, on weight matrices only (not biases or norm gains).
            betas: AdamW's moment decay rates (beta1, beta2).
            eps: AdamW's epsilon, added to the root of the second moment.
            warmup_steps: Optimiser steps of linear warmup from 0 to learning_rate.
            lr_decay: How the learning rate falls after warmup, to min_lr_ratio of its peak at the last step.
            min_lr_ratio: The learning rate at the last step, as a fraction of its peak (not with constant).
            compile: Compile the encoder blocks with torch.compile when the Trainer sets the model up.
            peak_flops: The device's peak FLOP/s that MFU is measured against. Unset: Lightning's table.
            pretrained: BERT weights in transformers format (a folder or hub name) to train further.
        """
        # The language model's settings of this call, read before any other local variable exists.
        language_model = {name: value for name, value in locals().items() if name in TransformerConfig.field_names()}
        super().__init__(**kwargs)
        check_schedule(lr_decay, min_lr_ratio)
        model = {**self.transformer_settings, **language_model}
        reads = pretrained is not None and self.reads_pretrained
        source = load_pretrained(pretrained, language_model=True) if reads else None
        resolved = resolve_architecture(model, source, language_model=True)
        if source is not None:
            refuse_unread_with_source({**model, **resolved}, source)
        # Recorded as built (loggers get them too), so a checkpoint rebuilds the same shapes without the source.
        self.save_hyperparameters({**self.hparams, **resolved})
        self.config = TransformerConfig(**{**model, **resolved})
        self.model = Transformer(self.config)
        if source is not None:
            check_trainable(self.config, source)
            self._load_source(source)
        self.val_loss = MeanMetric()
        self.ood_val_loss = MeanMetric()  # the data's second validation text, when it has one
        # What the run logged about itself at its start: the predicted initial loss, the data's baselines.
        self.described: dict[str, float] = {}
        self.initial_loss: float | None = None
        self._compiled = False
        self.matmul_weights = MatmulWeights.of(self.model)

    @torch.no_grad()
    def _load_source(self, source: PretrainedWeights) -> None:
        # No pooler here; the tied decoder is the token table, and a source without a head leaves it fresh.
        state = {key: value for key, value in source.state.items() if not key.startswith("pooler.")}
        source.load_into(
            self.model,
            state,
            lambda key: key == "head.decoder.weight" or (not source.has_head and key.startswith("head.")),
        )
        self.model.tie_weights()
        head = "its masked-LM head" if source.has_head else "a fresh head"
        rank_zero_info(f"loaded the embedding, encoder and {head} from {source.kind} {source.origin!r}")

    def forward(self, *args: Any, **kwargs: Any) -> LMOutput:
        """``Transformer.forward``."""
        return self.model(*args, **kwargs)

    def configure_model(self) -> None:
        """Before the strategy wraps the model: re-tie (after any materialisation) and ``compile``."""
        if any(t.is_meta for t in (*self.model.parameters(), *self.model.buffers())):
            # Built under ``trainer.init_module(empty_init=True)``: built again, drawn and tied, here.
            self.model = Transformer(self.config)
        self.model.tie_weights()  # an attribute assignment that materialisation or a wrapper may undo
        if self.hparams.get("compile") and not self._compiled:
            # Block by block, in place (checkpoint keys keep their names): the blocks share one graph, so
            # compile time does not grow with depth, and the data-dependent parts stay outside it.
            for block in self.model.encoder.blocks:
                block.compile()
            self._compiled = True

    def configure_callbacks(self) -> list[L.Callback]:
        # Checks, once the strategy has wrapped the model, that tied heads are still tied.
        return [TieGuard()]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A consolidated checkpoint may name the shared matrix once; refuse one from an untied model.
        state_dict = checkpoint.get("state_dict")
        if isinstance(state_dict, dict):
            restore_tied_entries(state_dict, tied_prefixes_of(self))

    def on_train_start(self) -> None:
        described = {LOG_N: math.log(self.config.vocab_size)}
        datamodule = getattr(self.trainer, "datamodule", None)
        repeat_rate = getattr(datamodule, "repeat_rate", 0.0) or 0.0
        described[metric_names.INIT_LOSS_PREDICTED] = predict_for_config(self.config, repeat_rate=repeat_rate).loss
        if datamodule is not None and hasattr(datamodule, "describe"):
            described.update(datamodule.describe())
        if datamodule is not None and hasattr(datamodule, "baselines") and datamodule.source != "synthetic":
            # Beside every loss, the losses of token frequencies and pairs on the same validation blocks.
            limit = self.trainer.limit_val_batches
            blocks = int(limit) * datamodule.batch_size if isinstance(limit, int) else None
            described.update(datamodule.baselines(limit_val_blocks=blocks))
        for logger in self.loggers:
            logger.log_metrics(described, step=self.global_step)
        fingerprint = getattr(datamodule, "tokenizer_fingerprint", None)
        if isinstance(fingerprint, str):
            # Beside the settings (hparams.yaml, W&B's config): which token ids the run read, so a
            # report never pairs runs of two tokenizers (tiedemb.experiments.evidence).
            for logger in self.loggers:
                logger.log_hyperparams({metric_names.TOKENIZER_FINGERPRINT: fingerprint})
        self.described = described

    def training_loss(self, batch: dict[str, Tensor]) -> Tensor:
        return self(**batch, return_logits=False).loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if self.global_step == 0 and batch_idx == 0 and self.initial_loss is None:
            self._log_initial_loss(batch)
        output = self(**batch, return_logits=False)  # the logits are never needed whole
        loss = output.loss
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"the training loss became {loss.item()} at step {self.global_step}; the run stops here "
                "(the last checkpoint written before this step is intact). Lower model.learning_rate or "
                "raise model.warmup_steps."
            )
        self.log(metric_names.TRAIN_LOSS, loss, prog_bar=True)
        self.log("train/ppl", torch.exp(loss.detach().clamp(max=50)))
        self.count_flops(batch["input_ids"], self._output_positions(output))
        return loss

    def _output_positions(self, output: LMOutput) -> int | None:
        # MLM computes logits at the masked positions only; None is every position.
        return None if self.config.causal else int(output.num_targets)

    @torch.no_grad()
    def _log_initial_loss(self, batch: dict[str, Tensor]) -> None:
        """The loss of the untouched model on the first batch, without dropout."""
        was_training = self.training
        self.eval()
        measured = self(**batch, return_logits=False).loss
        self.train(was_training)
        metrics = {
            metric_names.INIT_LOSS: measured.item(),
            **{k: v for k, v in self.described.items() if k.startswith("init/")},
        }
        # Straight to the loggers at step 0: Lightning's own cadence would drop or delay it.
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        self.initial_loss = metrics[metric_names.INIT_LOSS]

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        output = self(**batch, return_logits=False)
        self.count_flops(batch["input_ids"], self._output_positions(output))
        # weight by the number of predicted tokens, so the epoch value is a per-token mean
        metric = self.val_loss if dataloader_idx == 0 else self.ood_val_loss
        metric.update(output.loss.detach(), weight=max(output.num_targets, 1))

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    test_step = validation_step

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def _log_eval(self, stage: str) -> None:
        loss = self.val_loss.compute()  # synchronised across processes by torchmetrics
        self.val_loss.reset()
        self.log(metric_names.loss_name(stage), loss, prog_bar=True, add_dataloader_idx=False)
        self.log(f"{stage}/ppl", torch.exp(loss.clamp(max=50)), add_dataloader_idx=False)
        if self.ood_val_loss.update_count:
            ood = self.ood_val_loss.compute()
            self.ood_val_loss.reset()
            self.log(f"{stage}_ood/loss", ood, add_dataloader_idx=False)
