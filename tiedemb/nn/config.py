"""The one description of a model: plain, serialisable fields with string-valued variants.

Every field has the name a YAML file uses (``model.hidden_size`` ...), so a checkpoint's
hyperparameters rebuild the model and a sweep can vary any field by name.

This module is a leaf: it imports no other part of the model. It knows every name a field may
take (norms, activations, shuffles ...) and refuses the rest, so the modules that build the parts
look names up in their own tables without validating them again. Heads are the exception: each
head class registers its own name (``tiedemb.nn.heads.HEADS``), which checks ``model.head`` when
the head is built, so a new head is one class.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from tiedemb.errors import UserError
from tiedemb.options import (
    Bounds,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Rate,
    changed_from_default,
    check_arguments,
    no_effect,
    warn_no_effect,
)

# The names a setting may take, as ``Literal`` types: ``--help`` and shell completion list them, the
# parser refuses any other, and ``tiedemb.options.check_arguments`` refuses them in Python too.
Objective = Literal["mlm", "clm"]
Position = Literal["learned", "rope", "none"]
Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["pre", "post"]
ResidualInit = Literal["standard", "scaled", "zero", "deepnorm"]
Activation = Literal["gelu", "relu", "tanh", "silu"]
HeadActivation = Literal["none", "gelu", "relu", "tanh", "silu"]
Shuffle = Literal["half_swap", "channel_shuffle"]
EmbeddingProjection = Literal["auto", "always"]
OBJECTIVES = typing.get_args(Objective)
POSITIONS = typing.get_args(Position)
NORMS = typing.get_args(Norm)
NORM_POSITIONS = typing.get_args(NormPosition)
RESIDUAL_INITS = typing.get_args(ResidualInit)
ACTIVATIONS = typing.get_args(HeadActivation)
SHUFFLES = typing.get_args(Shuffle)
EMBEDDING_PROJECTIONS = typing.get_args(EmbeddingProjection)
#: Settings only some heads read, and those heads: given with another head they would change nothing.
#: ``untied_orth`` reads tied_orth's transform settings (it is that head with its own output matrix).
TRANSFORM_HEADS = ("tied_orth", "untied_orth")
HEAD_ONLY_SETTINGS = {
    "head_bias": TRANSFORM_HEADS,
    "head_activation": TRANSFORM_HEADS,
    "head_norm": TRANSFORM_HEADS,
    "shuffle": ("tied_shuffle",),
    "shuffle_groups": ("tied_shuffle",),
}
#: Keywords a scale setting may name instead of a number; ``d`` is the width of the vector scaled.
SCALE_KEYWORDS = ("sqrt_d", "rsqrt_d", "mup:<base_width>")


def resolve_scale(value: float | str, width: int, name: str = "scale") -> float:
    """A multiplier given as a number or a keyword of the width ``d`` it applies to.

    ``sqrt_d``: d^(1/2) (Gemma's input embedding). ``rsqrt_d``: d^(-1/2) (T5's tied readout).
    ``mup:B``: B/d, muP's readout multiplier 1/width_mult for a model tuned at base width B.
    Raises ``ValueError`` naming ``name`` for anything else.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not a number or one of {', '.join(SCALE_KEYWORDS)}")
    if isinstance(value, (int, float)):
        scale = float(value)
    elif value == "sqrt_d":
        scale = math.sqrt(width)
    elif value == "rsqrt_d":
        scale = 1.0 / math.sqrt(width)
    elif isinstance(value, str) and value.startswith("mup:") and value[4:].strip().isdigit() and int(value[4:]) > 0:
        scale = int(value[4:]) / width
    else:
        try:
            scale = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}={value!r} is not a number or one of {', '.join(SCALE_KEYWORDS)}") from None
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{name} must be a positive finite multiplier, got {value!r}")
    return scale


def readout_width(head: str, hidden_size: int, embedding_dim: int | None) -> int:
    """Width of the vector the output matrix multiplies: d_e for tied heads, hidden for untied."""
    return hidden_size if head == "untied" else (embedding_dim or hidden_size)


#: What a field describes, which decides which module declares it (``tiedemb.modules``):
ARCHITECTURE = "architecture"
"""The network's shape and parts: fine-tuning takes these from the pretrained model when unset."""
TRAINING = "training"
"""Dropout, initialisation and padding: chosen for each run, fine-tuning included."""
LANGUAGE_MODEL = "language model"
"""The pretraining objective, the output head and the remedies of its initial loss: a classifier has none."""
PARTS = (ARCHITECTURE, TRAINING, LANGUAGE_MODEL)


def setting(default: Any = dataclasses.MISSING, *, doc: str, part: str = ARCHITECTURE) -> Any:
    """A field with its description and its part (``ARCHITECTURE`` ...)."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    return dataclasses.field(default=default, metadata={"doc": doc, "part": part})


@dataclass
class TransformerConfig:
    """Every setting of the model, with its default and its meaning.

    The modules take these as flat keywords (``model.hidden_size`` ...), each declared in the
    ``__init__`` of the module its part belongs to: ``TransformerModule`` the architecture and
    training settings, ``PretrainModule`` the language model's (``tiedemb.modules``), with the type
    and default given here (``tests/modules/test_settings.py`` checks that they agree). A setting
    added here is added there too, where ``--help``, configs and checkpoints read it.
    """

    vocab_size: PositiveInt = setting(doc="Vocabulary size n; the command line takes it from the data's tokenizer.")
    objective: Objective = setting(
        "mlm", doc="mlm (masked tokens) or clm (next token, causal attention).", part=LANGUAGE_MODEL
    )
    hidden_size: PositiveInt = setting(768, doc="Width of the residual stream.")
    num_layers: PositiveInt = setting(12, doc="Number of Transformer blocks.")
    num_heads: PositiveInt = setting(12, doc="Attention heads per block; must divide hidden_size.")
    intermediate_size: PositiveInt = setting(3072, doc="Width of the feed-forward layer.")
    embedding_dim: PositiveInt | None = setting(
        None, doc="d_e, the width of the token table (1..hidden_size); unset: hidden_size."
    )
    embedding_projection: EmbeddingProjection = setting(
        "auto",
        doc="auto: a d_e -> hidden projection only when d_e < hidden (identity at full width); always: "
        "also at d_e = hidden, so every width of a width study has the same parts.",
    )
    embedding_norm: bool = setting(True, doc="The norm after the embedding; off for Gemma's and T5's inputs.")
    max_position_embeddings: PositiveInt = setting(512, doc="Longest sequence (rows of the learned position table).")
    position: Position = setting("learned", doc="learned (a position table), rope (rotary) or none.")
    type_vocab_size: NonNegativeInt = setting(2, doc="Segment (token type) vectors; 0 for none.")
    norm: Norm = setting("layernorm", doc="layernorm or rmsnorm.")
    norm_position: NormPosition = setting(
        "post", doc="post: norm(x + f(x)) as in BERT; pre: x + f(norm(x)) with a final norm."
    )
    norm_eps: PositiveFloat = setting(1e-12, doc="Epsilon of every norm.")
    activation: Activation = setting("gelu", doc="Feed-forward activation: gelu, relu, tanh or silu.")
    dropout: Rate = setting(0.1, doc="Dropout on embeddings and residual branches, in [0, 1).", part=TRAINING)
    attention_dropout: Rate = setting(0.1, doc="Dropout on attention weights, in [0, 1).", part=TRAINING)
    init_std: PositiveFloat = setting(
        0.02, doc="Std of the normal initialisation of weight matrices and tables.", part=TRAINING
    )
    residual_init: ResidualInit = setting(
        "standard",
        doc="How far from the identity residual branches start: standard, scaled (GPT-2), zero, "
        "deepnorm (post-norm only).",
    )
    rope_base: PositiveFloat = setting(10000.0, doc="Base of the rotary frequencies (position=rope).")
    head: str = setting(
        "tied",
        doc="Output layer: untied, tied, tied_scaled_init, tied_orth, untied_orth, tied_shuffle, or any head "
        "registered in tiedemb.nn.heads.HEADS.",
        part=LANGUAGE_MODEL,
    )
    output_bias: bool = setting(
        False, doc="A vocabulary-sized output bias (never part of the tie).", part=LANGUAGE_MODEL
    )
    head_bias: bool = setting(False, doc="tied_orth and untied_orth: a bias on its projection.", part=LANGUAGE_MODEL)
    head_activation: HeadActivation = setting(
        "none",
        doc="tied_orth and untied_orth: an activation after its projection (none, gelu, relu, tanh, silu).",
        part=LANGUAGE_MODEL,
    )
    head_norm: bool = setting(
        False,
        doc="tied_orth and untied_orth: a norm after its projection (with head_bias and gelu: BERT's MLM transform).",
        part=LANGUAGE_MODEL,
    )
    shuffle: Shuffle = setting(
        "half_swap", doc="tied_shuffle: half_swap, or channel_shuffle in shuffle_groups groups.", part=LANGUAGE_MODEL
    )
    shuffle_groups: Annotated[int, Bounds(2)] = setting(
        2, doc="tied_shuffle with channel_shuffle: groups; must divide d_e.", part=LANGUAGE_MODEL
    )
    # The wider field's remedies: a number or a keyword of the width d it applies to (resolve_scale).
    embedding_scale: PositiveFloat | str = setting(
        1.0, doc="Token vectors x this: a number, sqrt_d (Gemma), rsqrt_d or mup:<base_width>.", part=LANGUAGE_MODEL
    )
    output_scale: PositiveFloat | str = setting(
        1.0,
        doc="The vector meeting the output matrix x this: a number, rsqrt_d (T5), mup:<base_width> (muP) or sqrt_d.",
        part=LANGUAGE_MODEL,
    )
    embedding_init_std: PositiveFloat | None = setting(
        None, doc="Std of the token table (T5: 1.0); unset: init_std.", part=LANGUAGE_MODEL
    )
    pad_token_id: NonNegativeInt = setting(
        0, doc="Id of the padding token; the command line takes it from the data.", part=TRAINING
    )

    def __post_init__(self) -> None:
        if self.embedding_dim is None:
            self.embedding_dim = self.hidden_size
        # Types and bounds first (each field's annotation), then what fields require of each other.
        check_arguments(
            "model", typing.get_type_hints(TransformerConfig, include_extras=True), dataclasses.asdict(self)
        )
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
        if self.residual_init == "deepnorm" and self.norm_position != "post":
            raise UserError("model.residual_init=deepnorm is defined for model.norm_position=post")
        if self.head == "tied_shuffle":
            self._check_shuffle()
        self._refuse_unread_settings()

    def _refuse_unread_settings(self) -> None:
        """A setting the chosen parts do not read is refused, not dropped (``tiedemb.options.given``)."""
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        for name, heads in HEAD_ONLY_SETTINGS.items():
            value = getattr(self, name)
            if self.head not in heads and changed_from_default(value, defaults[name]):
                readers = " or ".join(heads)
                raise no_effect(
                    f"model.{name}", value, f"with model.head={self.head!r}: only the {readers} head reads it"
                )
        if (
            self.head == "tied_shuffle"
            and self.shuffle == "half_swap"
            and changed_from_default(self.shuffle_groups, defaults["shuffle_groups"])
        ):
            raise no_effect(
                "model.shuffle_groups",
                self.shuffle_groups,
                "with model.shuffle='half_swap', which always swaps two halves; groups are for channel_shuffle",
            )
        if self.position != "rope" and changed_from_default(self.rope_base, defaults["rope_base"]):
            raise no_effect(
                "model.rope_base",
                self.rope_base,
                f"with model.position={self.position!r}: only rotary positions have a base",
            )
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

    def _check_shuffle(self) -> None:
        """The shuffle head permutes the d_e dimensions in groups that must divide them."""
        width = self.embedding_dim
        if self.shuffle == "half_swap" and width % 2:
            raise UserError(f"model.shuffle=half_swap needs an even model.embedding_dim, got {width}")
        if self.shuffle == "channel_shuffle" and (self.shuffle_groups < 2 or width % self.shuffle_groups):
            raise UserError(
                f"model.shuffle_groups ({self.shuffle_groups}) must be >= 2 and divide model.embedding_dim ({width})"
            )

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
        return resolve_scale(
            self.output_scale, readout_width(self.head, self.hidden_size, self.embedding_dim), "model.output_scale"
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def field_names_of(cls, *parts: str) -> list[str]:
        """The fields that describe the given parts (``ARCHITECTURE`` ...), in declaration order."""
        return [f.name for f in dataclasses.fields(cls) if f.metadata.get("part", ARCHITECTURE) in parts]
