"""PretrainModule: the LightningModule that pretrains a ``Transformer`` with MLM or CLM."""

from __future__ import annotations

import math
import time

import lightning as L
import torch
from torch import Tensor
from torchmetrics import MeanMetric

from tiedemb.errors import UserError
from tiedemb.modules.optim import adamw_with_schedule
from tiedemb.nn import LMOutput, Transformer, TransformerConfig
from tiedemb.theory import predict_for_config


class TrainingDiverged(UserError):
    """The loss stopped being a finite number."""


class PretrainModule(L.LightningModule):
    """Embedding -> Encoder -> OutputHead, trained on masked or causal language modelling.

    The keyword names are the YAML's (``model.hidden_size`` ...); ``vocab_size`` comes from the
    data in the CLI. ``head`` picks the output layer: untied, tied, tied_scaled_init, tied_orth,
    tied_shuffle. Hyperparameters are plain values, so ``load_from_checkpoint(path)`` rebuilds any
    variant on its own.
    """

    def __init__(
        self,
        vocab_size: int,
        objective: str = "mlm",
        hidden_size: int = 768,
        num_layers: int = 12,
        num_heads: int = 12,
        intermediate_size: int = 3072,
        embedding_dim: int | None = None,
        max_position_embeddings: int = 512,
        position: str = "learned",
        type_vocab_size: int = 2,
        norm: str = "layernorm",
        norm_position: str = "post",
        norm_eps: float = 1e-12,
        activation: str = "gelu",
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        init_std: float = 0.02,
        residual_init: str = "standard",
        rope_base: float = 10000.0,
        head: str = "tied",
        output_bias: bool = False,
        head_bias: bool = False,
        head_activation: str = "none",
        head_norm: bool = False,
        shuffle: str = "half_swap",
        shuffle_groups: int = 2,
        pad_token_id: int = 0,
        learning_rate: float = 5e-4,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-6,
        warmup_steps: int = 100,
        lr_decay: str = "linear",
        min_lr_ratio: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        model_fields = set(TransformerConfig.field_names())
        self.config = TransformerConfig(**{k: v for k, v in self.hparams.items() if k in model_fields})
        self.model = Transformer(self.config)
        self.val_loss = MeanMetric()
        self._last_step_time: float | None = None
        self._described: dict[str, float] = {}
        self.initial_loss: float | None = None

    # -- the Hugging Face-style forward ---------------------------------------------------------
    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> LMOutput:
        return self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels)

    # -- training ------------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        described = {"init/log_n": math.log(self.config.vocab_size)}
        datamodule = getattr(self.trainer, "datamodule", None)
        repeat_rate = getattr(datamodule, "repeat_rate", 0.0) or 0.0
        described["init/loss_pred"] = predict_for_config(self.config, repeat_rate=repeat_rate).loss
        if datamodule is not None and hasattr(datamodule, "describe"):
            described.update(datamodule.describe())
        for logger in self.loggers:
            logger.log_metrics(described, step=self.global_step)
        self._described = described
        self._last_step_time = None

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if self.global_step == 0 and batch_idx == 0 and self.initial_loss is None:
            self._log_initial_loss(batch)
        output = self(**batch)
        loss = output.loss
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"the training loss became {loss.item()} at step {self.global_step}; the run stops here "
                "(the last checkpoint written before this step is intact). Lower model.learning_rate or "
                "raise model.warmup_steps."
            )
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/ppl", torch.exp(loss.detach().clamp(max=50)))
        self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"] if self.trainer.optimizers else 0.0)
        now = time.perf_counter()
        if self._last_step_time is not None:
            tokens = batch["input_ids"].numel() * self.trainer.world_size
            self.log("train/tokens_per_sec", tokens / max(now - self._last_step_time, 1e-9))
        self._last_step_time = now
        return loss

    @torch.no_grad()
    def _log_initial_loss(self, batch: dict[str, Tensor]) -> None:
        """The loss of the untouched model on the first batch, without dropout."""
        was_training = self.training
        self.eval()
        measured = self(**batch).loss
        self.train(was_training)
        metrics = {"init/loss": measured.item(), **{k: v for k, v in self._described.items() if k.startswith("init/")}}
        # Straight to the loggers at step 0: Lightning's own cadence would drop or delay it.
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        self.initial_loss = metrics["init/loss"]

    # -- validation ----------------------------------------------------------------------------------
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        output = self(**batch)
        # weight by the number of predicted tokens, so the epoch value is a per-token mean
        self.val_loss.update(output.loss.detach(), weight=max(output.num_targets, 1))

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    test_step = validation_step

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def _log_eval(self, stage: str) -> None:
        loss = self.val_loss.compute()  # synchronised across processes by torchmetrics
        self.val_loss.reset()
        self.log(f"{stage}/loss", loss, prog_bar=True)
        self.log(f"{stage}/ppl", torch.exp(loss.clamp(max=50)))

    # -- optimisation --------------------------------------------------------------------------------
    def configure_optimizers(self) -> dict:
        hp = self.hparams
        return adamw_with_schedule(
            self.model,
            learning_rate=hp.learning_rate,
            weight_decay=hp.weight_decay,
            betas=tuple(hp.betas),
            eps=hp.eps,
            total_steps=int(self.trainer.estimated_stepping_batches),
            warmup_steps=hp.warmup_steps,
            decay=hp.lr_decay,
            min_lr_ratio=hp.min_lr_ratio,
        )
