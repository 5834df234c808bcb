"""The one description of a model: plain, serialisable fields with string-valued variants.

Every field has the name a YAML file uses (``model.hidden_size`` ...), so a checkpoint's
hyperparameters rebuild the model and a sweep can vary any field by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tiedemb.errors import UserError, check_choice
from tiedemb.theory import readout_width, resolve_scale

OBJECTIVES = ("mlm", "clm")
POSITIONS = ("learned", "rope", "none")
NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
RESIDUAL_INITS = ("standard", "scaled", "zero", "deepnorm")
ACTIVATIONS = ("none", "gelu", "relu", "tanh", "silu")
SHUFFLES = ("half_swap", "channel_shuffle")
EMBEDDING_PROJECTIONS = ("auto", "always")


@dataclass
class TransformerConfig:
    vocab_size: int
    objective: str = "mlm"
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    embedding_dim: int | None = None  # d_e; None means hidden_size
    # "auto": a d_e -> hidden projection only when d_e < hidden (identity at full width);
    # "always": also at d_e = hidden, so every width of a width study has the same parts.
    embedding_projection: str = "auto"
    embedding_norm: bool = True  # the norm after the embedding; off for Gemma's and T5's inputs
    max_position_embeddings: int = 512
    position: str = "learned"
    type_vocab_size: int = 2
    norm: str = "layernorm"
    norm_position: str = "post"
    norm_eps: float = 1e-12
    activation: str = "gelu"
    dropout: float = 0.1
    attention_dropout: float = 0.1
    init_std: float = 0.02
    residual_init: str = "standard"
    rope_base: float = 10000.0
    # output head
    head: str = "tied"
    output_bias: bool = False
    head_bias: bool = False
    head_activation: str = "none"
    head_norm: bool = False
    shuffle: str = "half_swap"
    shuffle_groups: int = 2
    # the wider field's remedies: a number or a keyword of the width d it applies to
    # (tiedemb.theory.resolve_scale): "sqrt_d", "rsqrt_d", "mup:<base_width>"
    embedding_scale: float | str = 1.0  # token vectors x this (Gemma: "sqrt_d")
    output_scale: float | str = 1.0  # the vector meeting the output matrix x this (T5: "rsqrt_d"; muP)
    embedding_init_std: float | None = None  # the token table's std when set (T5: 1.0), else init_std
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        if self.embedding_dim is None:
            self.embedding_dim = self.hidden_size
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings")
        for name in positive:
            if getattr(self, name) <= 0:
                raise UserError(f"model.{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.embedding_dim <= self.hidden_size:
            raise UserError(
                f"model.embedding_dim must be in 1..hidden_size ({self.hidden_size}), got {self.embedding_dim}"
            )
        if self.hidden_size % self.num_heads:
            raise UserError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by model.num_heads ({self.num_heads})"
            )
        if self.position == "rope" and (self.hidden_size // self.num_heads) % 2:
            raise UserError("model.position=rope needs an even head size (hidden_size / num_heads)")
        if self.type_vocab_size < 0:
            raise UserError(f"model.type_vocab_size must be >= 0, got {self.type_vocab_size}")
        if self.init_std <= 0:
            raise UserError(f"model.init_std must be positive, got {self.init_std}")
        if self.embedding_init_std is not None and self.embedding_init_std <= 0:
            raise UserError(f"model.embedding_init_std must be positive, got {self.embedding_init_std}")
        for name in ("embedding_scale", "output_scale"):
            try:
                resolve_scale(getattr(self, name), self.embedding_dim, f"model.{name}")
            except ValueError as error:
                raise UserError(str(error)) from None
        for name, value in (("dropout", self.dropout), ("attention_dropout", self.attention_dropout)):
            if not 0.0 <= value < 1.0:
                raise UserError(f"model.{name} must be in [0, 1), got {value}")
        check_choice("model.objective", self.objective, OBJECTIVES)
        check_choice("model.position", self.position, POSITIONS)
        check_choice("model.norm", self.norm, NORMS)
        check_choice("model.norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("model.embedding_projection", self.embedding_projection, EMBEDDING_PROJECTIONS)
        check_choice("model.residual_init", self.residual_init, RESIDUAL_INITS)
        check_choice("model.activation", self.activation, ACTIVATIONS[1:])
        check_choice("model.head_activation", self.head_activation, ACTIVATIONS)
        if self.residual_init == "deepnorm" and self.norm_position != "post":
            raise UserError("model.residual_init=deepnorm is defined for model.norm_position=post")
        # Imported here: heads import this module for the config type.
        from tiedemb.nn.heads import HEADS

        check_choice("model.head", self.head, HEADS)
        HEADS[self.head].validate(self)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def projected(self) -> bool:
        """Whether the embedding has a d_e -> hidden projection (and the plain tied heads a down-map)."""
        return self.embedding_dim != self.hidden_size or self.embedding_projection == "always"

    @property
    def causal(self) -> bool:
        return self.objective == "clm"

    @property
    def token_scale(self) -> float:
        """``embedding_scale`` as a number: the token vectors' width is d_e."""
        return resolve_scale(self.embedding_scale, self.embedding_dim, "model.embedding_scale")

    @property
    def readout_scale(self) -> float:
        """``output_scale`` as a number, for the width of the vector the output matrix meets."""
        return resolve_scale(self.output_scale, readout_width(self.head, self.hidden_size, self.embedding_dim),
                             "model.output_scale")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]
