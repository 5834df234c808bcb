"""The one description of a model: plain fields named as a YAML file names them (``model.hidden_size``).

A leaf module: ``model.head`` is checked by the head registry (``tiedemb.nn.heads.HEADS``) when the
head is built, so a new head is one class.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

from tiedemb.errors import UserError
from tiedemb.options import (
    AtLeastTwo,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Rate,
    changed_from_default,
    no_effect,
    warn_no_effect,
)

# The names a setting may take: the parser and ``--help`` read them.
Objective = Literal["mlm", "clm"]
Position = Literal["learned", "rope", "none"]
Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["pre", "post"]
ResidualInit = Literal["standard", "scaled", "zero"]
Activation = Literal["gelu", "relu", "tanh", "silu"]
HeadActivation = Literal["none", "gelu", "relu", "tanh", "silu"]
Shuffle = Literal["half_swap", "channel_shuffle"]
EmbeddingProjection = Literal["auto", "always"]
NORMS = typing.get_args(Norm)
ACTIVATIONS = typing.get_args(HeadActivation)
#: Settings only some heads read, and those heads: given with another head they would change nothing.
TRANSFORM_HEADS = ("tied_orth", "untied_orth")
HEAD_ONLY_SETTINGS = {
    "head_bias": TRANSFORM_HEADS,
    "head_activation": TRANSFORM_HEADS,
    "head_norm": TRANSFORM_HEADS,
    "shuffle": ("tied_shuffle",),
    "shuffle_groups": ("tied_shuffle",),
}


def resolve_scale(value: float | str, width: int, name: str = "scale") -> float:
    """A multiplier given as a number or a keyword of the width d it applies to: ``sqrt_d`` (Gemma's
    input embedding), ``rsqrt_d`` (T5's tied readout) or ``mup:B``, B/d (muP's readout tuned at width B)."""
    keywords = {"sqrt_d": math.sqrt(width), "rsqrt_d": 1.0 / math.sqrt(width)}
    try:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, str) and value.startswith("mup:"):
            scale = int(value[4:]) / width
        else:
            scale = keywords[value] if value in keywords else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number or one of sqrt_d, rsqrt_d, mup:<base_width>") from None
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{name} must be a positive finite multiplier, got {value!r}")
    return scale


# What a field describes, which decides which module declares it (``tiedemb.modules``): the network's
# shape (fine-tuning takes it from the pretrained model when unset), what each run chooses (dropout,
# initialisation, padding), and the language model's objective and head (a classifier has none).
ARCHITECTURE, TRAINING, LANGUAGE_MODEL = "architecture", "training", "language model"


def setting(default: Any = dataclasses.MISSING, *, part: str = ARCHITECTURE) -> Any:
    return dataclasses.field(default=default, metadata={"part": part})


@dataclass
class TransformerConfig:
    """Every setting of the model; each is also a keyword of the module its part belongs to, whose
    ``Args:`` say what it means (``tests/modules/test_settings.py`` checks that the two agree)."""

    vocab_size: PositiveInt = setting()
    objective: Objective = setting("mlm", part=LANGUAGE_MODEL)
    hidden_size: PositiveInt = setting(768)
    num_layers: PositiveInt = setting(12)
    num_heads: PositiveInt = setting(12)
    intermediate_size: PositiveInt = setting(3072)
    embedding_dim: PositiveInt | None = setting(None)
    embedding_projection: EmbeddingProjection = setting("auto")
    embedding_norm: bool = setting(True)
    max_position_embeddings: PositiveInt = setting(512)
    position: Position = setting("learned")
    type_vocab_size: NonNegativeInt = setting(2)
    norm: Norm = setting("layernorm")
    norm_position: NormPosition = setting("post")
    norm_eps: PositiveFloat = setting(1e-12)
    activation: Activation = setting("gelu")
    dropout: Rate = setting(0.1, part=TRAINING)
    attention_dropout: Rate = setting(0.1, part=TRAINING)
    init_std: PositiveFloat = setting(0.02, part=TRAINING)
    residual_init: ResidualInit = setting("standard")
    rope_base: PositiveFloat = setting(10000.0)
    head: str = setting("tied", part=LANGUAGE_MODEL)
    output_bias: bool = setting(False, part=LANGUAGE_MODEL)
    head_bias: bool = setting(False, part=LANGUAGE_MODEL)
    head_activation: HeadActivation = setting("none", part=LANGUAGE_MODEL)
    head_norm: bool = setting(False, part=LANGUAGE_MODEL)
    shuffle: Shuffle = setting("half_swap", part=LANGUAGE_MODEL)
    shuffle_groups: AtLeastTwo = setting(2, part=LANGUAGE_MODEL)
    # The wider field's remedies: a number or a keyword of the width d it applies to (resolve_scale).
    embedding_scale: PositiveFloat | str = setting(1.0, part=LANGUAGE_MODEL)
    output_scale: PositiveFloat | str = setting(1.0, part=LANGUAGE_MODEL)
    embedding_init_std: PositiveFloat | None = setting(None, part=LANGUAGE_MODEL)
    pad_token_id: NonNegativeInt = setting(0, part=TRAINING)

    def __post_init__(self) -> None:
        if self.embedding_dim is None:
            self.embedding_dim = self.hidden_size
        if self.embedding_dim > self.hidden_size:
            raise UserError(
                f"model.embedding_dim must be in 1..hidden_size ({self.hidden_size}), got {self.embedding_dim}"
            )
        if self.hidden_size % self.num_heads:
            raise UserError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by model.num_heads ({self.num_heads})"
            )
        if self.position == "rope" and (self.hidden_size // self.num_heads) % 2:
            raise UserError("model.position=rope needs an even head size (hidden_size / num_heads)")
        for name in ("embedding_scale", "output_scale"):
            try:
                resolve_scale(getattr(self, name), self.embedding_dim, f"model.{name}")
            except ValueError as error:
                raise UserError(str(error)) from None
        groups = 2 if self.shuffle == "half_swap" else self.shuffle_groups
        if self.head == "tied_shuffle" and self.embedding_dim % groups:
            what = f"model.shuffle_groups ({groups})" if groups != 2 else f"model.shuffle={self.shuffle}'s 2 groups"
            raise UserError(f"{what} must divide model.embedding_dim ({self.embedding_dim})")
        self._refuse_unread_settings()

    def _refuse_unread_settings(self) -> None:
        """A setting the chosen parts do not read is refused, not dropped (``tiedemb.options.given``)."""
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        unread = {  # setting -> why the chosen parts do not read it
            name: f"with model.head={self.head!r}: only the {' or '.join(heads)} head reads it"
            for name, heads in HEAD_ONLY_SETTINGS.items()
            if self.head not in heads
        }
        if self.head == "tied_shuffle" and self.shuffle == "half_swap":
            unread["shuffle_groups"] = (
                "with model.shuffle='half_swap', which always swaps two halves; groups are for channel_shuffle"
            )
        if self.position != "rope":
            unread["rope_base"] = f"with model.position={self.position!r}: only rotary positions have a base"
        for name, why in unread.items():
            if changed_from_default(getattr(self, name), defaults[name]):
                raise no_effect(f"model.{name}", getattr(self, name), why)
        if self.position == "none" and changed_from_default(
            self.max_position_embeddings, defaults["max_position_embeddings"]
        ):
            # A warning, not an error: recipes size the position table and `position: none` composes with them.
            warn_no_effect(
                "model.max_position_embeddings",
                self.max_position_embeddings,
                "with model.position='none': there is no position or rotary table to size",
            )
        if self.head == "tied_scaled_init" and self.embedding_init_std is not None:
            # A warning, not an error: the study's recipe sets the table's std for every head it composes with.
            warn_no_effect(
                "model.embedding_init_std",
                self.embedding_init_std,
                "with model.head='tied_scaled_init', which draws the shared table with std ln(n)/d_e",
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def projected(self) -> bool:
        """Whether the embedding has a d_e -> hidden projection (and the tied heads a down-map)."""
        return self.embedding_dim != self.hidden_size or self.embedding_projection == "always"

    @property
    def causal(self) -> bool:
        return self.objective == "clm"

    @property
    def token_scale(self) -> float:
        return resolve_scale(self.embedding_scale, self.embedding_dim, "model.embedding_scale")

    @property
    def readout_scale(self) -> float:
        # For the width of the vector the output matrix meets.
        width = self.hidden_size if self.head == "untied" else self.embedding_dim
        return resolve_scale(self.output_scale, width, "model.output_scale")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def field_names_of(cls, *parts: str) -> list[str]:
        """The fields that describe the given parts (``ARCHITECTURE`` ...), in declaration order."""
        return [f.name for f in dataclasses.fields(cls) if f.metadata.get("part", ARCHITECTURE) in parts]
