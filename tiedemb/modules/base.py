"""TransformerModule: the Transformer settings both LightningModules take, checked and recorded.

A module takes its own settings as keywords and passes the rest on with ``super().__init__(**kwargs)``,
which LightningCLI follows, so ``--model.help`` lists both; ``save_hyperparameters`` here records the
whole chain. Each setting is a ``TransformerConfig`` field written again as a signature (what
LightningCLI, an editor and a type checker read; ``tests/modules/test_settings.py`` checks them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import lightning as L
from torch import Tensor

from tiedemb.modules.optim import adamw_with_schedule
from tiedemb.modules.throughput import MatmulWeights
from tiedemb.nn.config import (
    Activation,
    EmbeddingProjection,
    Norm,
    NormPosition,
    Position,
    ResidualInit,
    TransformerConfig,
)
from tiedemb.options import NonNegativeInt, PositiveFloat, PositiveInt, Rate

if TYPE_CHECKING:
    from typing_extensions import Self

FROM_CHECKPOINT = "_from_checkpoint"


class TransformerModule(L.LightningModule):
    """Unset (``None``) architecture settings are the ``pretrained`` model's, else ``TransformerConfig``'s
    defaults. A subclass builds ``self.model``, counts its ``matmul_weights`` at once (before a sharding
    strategy wraps it) and calls ``count_flops`` with each batch it runs."""

    def __init__(
        self,
        *,
        vocab_size: PositiveInt | None = None,
        hidden_size: PositiveInt | None = None,
        num_layers: PositiveInt | None = None,
        num_heads: PositiveInt | None = None,
        intermediate_size: PositiveInt | None = None,
        embedding_dim: PositiveInt | None = None,
        embedding_projection: EmbeddingProjection | None = None,
        embedding_norm: bool | None = None,
        max_position_embeddings: PositiveInt | None = None,
        position: Position | None = None,
        type_vocab_size: NonNegativeInt | None = None,
        norm: Norm | None = None,
        norm_position: NormPosition | None = None,
        norm_eps: PositiveFloat | None = None,
        activation: Activation | None = None,
        residual_init: ResidualInit | None = None,
        rope_base: PositiveFloat | None = None,
        dropout: Rate = 0.1,
        attention_dropout: Rate = 0.1,
        init_std: PositiveFloat = 0.02,
        pad_token_id: NonNegativeInt = 0,
        _from_checkpoint: bool = False,
    ) -> None:
        """The settings, each a ``TransformerConfig`` field.

        Args:
            vocab_size: Vocabulary size n; the command line takes it from the data's tokenizer. Unset: the pretrained
                model's.
            hidden_size: Width of the residual stream. Unset: the pretrained model's, else 768.
            num_layers: Number of Transformer blocks. Unset: the pretrained model's, else 12.
            num_heads: Attention heads per block; must divide hidden_size. Unset: the pretrained model's, else 12.
            intermediate_size: Width of the feed-forward layer. Unset: the pretrained model's, else 3072.
            embedding_dim: d_e, the width of the token table (1..hidden_size). Unset: the pretrained model's, else
                hidden_size.
            embedding_projection: auto: a d_e -> hidden projection only when d_e < hidden (identity at full width);
                always: also at d_e = hidden, so every width of a width study has the same parts. Unset: the
                pretrained model's, else 'auto'.
            embedding_norm: The norm after the embedding; off for Gemma's and T5's inputs. Unset: the pretrained
                model's, else True.
            max_position_embeddings: Longest sequence (rows of the learned position table). Unset: the pretrained
                model's, else 512.
            position: learned (a position table), rope (rotary) or none. Unset: the pretrained model's, else
                'learned'.
            type_vocab_size: Segment (token type) vectors; 0 for none. Unset: the pretrained model's, else 2.
            norm: layernorm or rmsnorm. Unset: the pretrained model's, else 'layernorm'.
            norm_position: post: norm(x + f(x)) as in BERT; pre: x + f(norm(x)) with a final norm. Unset: the
                pretrained model's, else 'post'.
            norm_eps: Epsilon of every norm. Unset: the pretrained model's, else 1e-12.
            activation: Feed-forward activation: gelu, relu, tanh or silu. Unset: the pretrained model's, else
                'gelu'.
            residual_init: How far from the identity residual branches start: standard, scaled (GPT-2) or zero.
                Unset: the pretrained model's, else 'standard'.
            rope_base: Base of the rotary frequencies (position=rope). Unset: the pretrained model's, else 10000.0.
            dropout: Dropout on embeddings and residual branches, in [0, 1).
            attention_dropout: Dropout on attention weights, in [0, 1).
            init_std: Std of the normal initialisation of weight matrices and tables.
            pad_token_id: Id of the padding token; the command line takes it from the data.
            _from_checkpoint: Built for a checkpoint's weights: its ``pretrained`` source (maybe gone) is not read.
        """
        # The arguments of this call, read before any other local variable exists.
        settings = {name: value for name, value in locals().items() if name in TransformerConfig.field_names()}
        super().__init__()
        self.save_hyperparameters(ignore=[FROM_CHECKPOINT])
        # Unset architecture settings are None here; the subclass resolves them against its source.
        self.transformer_settings: dict[str, Any] = settings
        # Whether model.pretrained, when set, is read: not when a checkpoint's weights replace it.
        self.reads_pretrained = not _from_checkpoint
        self.matmul_weights: MatmulWeights | None = None
        self.flops_per_batch: float | None = None

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Self:  # type: ignore[override]
        """Rebuild from a checkpoint alone; the ``pretrained`` source it names is not read."""
        return super().load_from_checkpoint(checkpoint_path, *args, **{FROM_CHECKPOINT: True, **kwargs})

    def count_flops(self, input_ids: Tensor, output_positions: int | None) -> None:
        """The model FLOPs of the batch just run, for ``ThroughputMonitor``; ``output_positions``: the
        positions the output head computes (None: all of them)."""
        weights = self.matmul_weights
        count = weights.training_flops if self.training else weights.forward_flops
        self.flops_per_batch = count(*input_ids.shape, output_positions=output_positions)

    def configure_optimizers(self) -> dict:
        hp = self.hparams
        total = int(self.trainer.estimated_stepping_batches)
        warmup = hp.warmup_steps if hp.warmup_steps is not None else round(hp.warmup_ratio * total)
        return adamw_with_schedule(
            self.model,
            learning_rate=hp.learning_rate,
            weight_decay=hp.weight_decay,
            betas=tuple(hp.betas),
            eps=hp.eps,
            total_steps=total,
            warmup_steps=warmup,
            decay=hp.lr_decay,
            min_lr_ratio=hp.min_lr_ratio,
        )
