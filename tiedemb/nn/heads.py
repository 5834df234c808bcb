"""Output heads: hidden states -> vocabulary logits. One class per ``model.head`` name.

``class MyHead(TiedHead, name="my_head")`` registers a head in ``HEADS``. The class owns its parts,
how it reads the hidden state (``transform``), its initial values (``reset_parameters``, ``token_std``)
and a fresh model's logits (``initial_logits``, which ``tiedemb.theory`` reads). A tied head's
``decoder.weight`` *is* the token table; when d_e < hidden, the plain tied heads' hidden -> d_e map
starts as the transpose of the embedding projection, so a fresh model is still a tied 2-gram model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tiedemb.errors import check_choice
from tiedemb.nn.layers import ACTIVATION_FUNCTIONS, init_linear, init_norms, make_norm

HEADS: dict[str, type[OutputHead]] = {}
"""``model.head`` name -> head class, in the order the classes were defined (the order messages list them)."""


def head_class(name: str) -> type[OutputHead]:
    """The head registered under ``name``; a ``UserError`` naming the registered ones otherwise."""
    return HEADS[check_choice("model.head", name, HEADS)]


@dataclass(frozen=True)
class FreshReadout:
    """What a fresh, near-identity network hands its head (``tiedemb.theory``): token i arrives as
    x = norm(w_i + p_t + s), |x|^2 = hidden, w_i drawn with std ``token_std``; ``token_share`` is the
    token's part of x's scale; through P and a tied head's P^T, x . w_i keeps ``aligned_gain`` of
    |w_i|^2 / rms, and the other scores see a vector of squared length ``mixed_width``."""

    hidden_size: int
    embedding_dim: int
    token_std: float
    init_std: float
    token_share: float
    aligned_gain: float
    mixed_width: float


class OutputHead(nn.Module):
    """The shared parts of every head: the decoder matrix, the output bias and the readout scale."""

    name: ClassVar[str]
    tied: ClassVar[bool] = True

    def __init_subclass__(cls, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name
            HEADS[name] = cls

    def __init__(self, config: Any) -> None:
        super().__init__()
        width = self.readout_dim(config)
        self.init_std = config.init_std
        self.decoder = nn.Linear(width, config.vocab_size, bias=False)
        # Output-only bias: never part of the tie.
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.output_bias else None
        # T5's d^-1/2 or muP's multiplier on what meets the decoder (so the bias stays unscaled).
        self.scale = config.readout_scale

    @classmethod
    def readout_dim(cls, config: Any) -> int:
        """Width of the vector the decoder matrix multiplies: d_e for a tied head, hidden otherwise."""
        return config.embedding_dim if cls.tied else config.hidden_size

    def transform(self, hidden: Tensor) -> Tensor:
        """hidden (..., hidden_size) -> the vector multiplied by the decoder matrix."""
        return hidden

    def features(self, hidden: Tensor) -> Tensor:
        """What meets the decoder matrix: the transform, then the readout scale."""
        x = self.transform(hidden)
        return x * self.scale if self.scale != 1.0 else x

    def forward(self, hidden: Tensor) -> Tensor:
        logits = self.decoder(self.features(hidden))  # (..., vocab)
        return logits + self.bias if self.bias is not None else logits

    @classmethod
    def token_std(
        cls, *, vocab_size: int, embedding_dim: int, init_std: float, embedding_init_std: float | None
    ) -> float:
        """The std the token table (for a tied head, the shared matrix) is drawn with."""
        return embedding_init_std if embedding_init_std is not None else init_std

    @torch.no_grad()
    def reset_parameters(self, embedding: nn.Module) -> None:
        """Draw the head's own parameters; ``embedding`` is already drawn (a tied decoder is its table)."""
        if not self.tied:
            init_linear(self.decoder, self.init_std)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        init_norms(self)

    @classmethod
    def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
        """(self_logit, logit_var) of a fresh model: the expected score of the input token itself,
        and the variance of every other score (docs/science.md §1, ``tiedemb.theory``)."""
        raise NotImplementedError(f"{cls.__qualname__} predicts no initial loss: define initial_logits")


class UntiedHead(OutputHead, name="untied"):
    """A separate n x hidden output matrix."""

    tied = False

    @classmethod
    def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
        # |x|^2 = hidden meets rows drawn with init_std (never the token table's std), unrelated to w_i.
        return 0.0, readout.hidden_size * readout.init_std**2


class TiedHead(OutputHead, name="tied"):
    """logits = h E^T."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.down = nn.Linear(config.hidden_size, config.embedding_dim, bias=False) if config.projected else None

    def transform(self, hidden: Tensor) -> Tensor:
        return self.down(hidden) if self.down is not None else hidden

    @torch.no_grad()
    def reset_parameters(self, embedding: nn.Module) -> None:
        super().reset_parameters(embedding)
        if self.down is not None:  # P^T: a fresh model is still a tied 2-gram model
            self.down.weight.copy_(embedding.projection.weight.T)

    @classmethod
    def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
        # The input token scores its own row: x . w_i = aligned_gain * token_share * sigma.
        sigma = readout.token_std
        return readout.aligned_gain * readout.token_share * sigma, readout.mixed_width * sigma**2


class TiedScaledInitHead(TiedHead, name="tied_scaled_init"):
    """Tied, with the shared matrix drawn with std (ln n)/d so that exp(d sigma) = n."""

    @classmethod
    def token_std(
        cls, *, vocab_size: int, embedding_dim: int, init_std: float, embedding_init_std: float | None
    ) -> float:
        # The head's own rule wins over both stds (the config warns that embedding_init_std is moot).
        return math.log(vocab_size) / embedding_dim


class TiedOrthHead(OutputHead, name="tied_orth"):
    """Tied, after an orthogonally initialised projection (+ optional bias, activation, norm: all three
    with gelu are BERT's MLM transform)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.projection = nn.Linear(config.hidden_size, config.embedding_dim, bias=config.head_bias)
        self.activation = ACTIVATION_FUNCTIONS.get(config.head_activation)
        self.norm = make_norm(config.norm, config.embedding_dim, config.norm_eps) if config.head_norm else None

    def transform(self, hidden: Tensor) -> Tensor:
        x = self.projection(hidden)
        if self.activation is not None:
            x = self.activation(x)
        return self.norm(x) if self.norm is not None else x

    @torch.no_grad()
    def reset_parameters(self, embedding: nn.Module) -> None:
        super().reset_parameters(embedding)
        nn.init.orthogonal_(self.projection.weight)
        if self.projection.bias is not None:
            nn.init.zeros_(self.projection.bias)

    @classmethod
    def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
        # The orthogonal map keeps a d_e/hidden share of |x|^2 and decorrelates it from w_i.
        return 0.0, readout.embedding_dim * readout.token_std**2


class UntiedOrthHead(TiedOrthHead, name="untied_orth"):
    """tied_orth's transform before its own d_e x n output matrix: the control that differs from
    ``tied_orth`` only in the output matrix being a separate parameter instead of the token table."""

    tied = False

    @classmethod
    def readout_dim(cls, config: Any) -> int:
        return config.embedding_dim

    @classmethod
    def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
        # The transform's d_e-wide output meets rows drawn with init_std, unrelated to w_i.
        return 0.0, readout.embedding_dim * readout.init_std**2


class TiedShuffleHead(TiedHead, name="tied_shuffle"):
    """Tied, after a parameter-free permutation of the dimensions, which leaves w_i nearly orthogonal
    to itself at init: ``half_swap`` [w[d/2:], w[:d/2]], or ``channel_shuffle`` (ShuffleNet's)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.mode = config.shuffle
        self.groups = 2 if config.shuffle == "half_swap" else config.shuffle_groups

    def transform(self, hidden: Tensor) -> Tensor:
        x = super().transform(hidden)
        if self.mode == "half_swap":
            first, second = x.chunk(2, dim=-1)
            return torch.cat((second, first), dim=-1)
        *lead, width = x.shape
        return x.reshape(*lead, self.groups, width // self.groups).transpose(-1, -2).reshape(*lead, width)

    @classmethod
    def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
        # The permutation of what the tied down-map produces scores rows unrelated to w_i.
        return 0.0, readout.mixed_width * readout.token_std**2


def build_head(config: Any) -> OutputHead:
    return head_class(config.head)(config)
