"""Output heads: hidden states -> vocabulary logits.

Tied heads own a ``decoder`` whose weight *is* the token embedding (``Transformer.tie_weights``
assigns the one Parameter to both places). When d_e < hidden a tied head must first map
hidden -> d_e; the plain tied heads do that with a learned linear map initialised to the
transpose of the embedding projection, so a fresh model is still a tied 2-gram model and the
effect under study is not hidden by a random map (that random map is what ``tied_orth`` is).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.layers import ACTIVATION_FUNCTIONS, make_norm


class OutputHead(nn.Module):
    tied: bool = True

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        width = config.embedding_dim if self.tied else config.hidden_size
        self.decoder = nn.Linear(width, config.vocab_size, bias=False)
        # Output-only bias: never part of the tie.
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.output_bias else None
        # T5's d^-1/2 or muP's multiplier on what meets the decoder (so the bias stays unscaled).
        self.scale = config.readout_scale

    @staticmethod
    def embedding_std(config: TransformerConfig) -> float:
        """The std the shared token matrix is drawn with."""
        return config.embedding_init_std if config.embedding_init_std is not None else config.init_std

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


class UntiedHead(OutputHead):
    """A separate n x hidden output matrix."""

    tied = False


class TiedHead(OutputHead):
    """logits = h E^T."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.down = nn.Linear(config.hidden_size, config.embedding_dim, bias=False) if config.projected else None

    def transform(self, hidden: Tensor) -> Tensor:
        return self.down(hidden) if self.down is not None else hidden


class TiedScaledInitHead(TiedHead):
    """Tied, with the shared matrix drawn with std (ln n)/d so that exp(d sigma) = n."""

    @staticmethod
    def embedding_std(config: TransformerConfig) -> float:
        return math.log(config.vocab_size) / config.embedding_dim


class TiedOrthHead(OutputHead):
    """Tied, after an orthogonally initialised projection (+ optional bias, activation, norm).

    ``head_bias: true, head_activation: gelu, head_norm: true`` is BERT's MLM transform.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.projection = nn.Linear(config.hidden_size, config.embedding_dim, bias=config.head_bias)
        self.activation = ACTIVATION_FUNCTIONS.get(config.head_activation)
        self.norm = make_norm(config.norm, config.embedding_dim, config.norm_eps) if config.head_norm else None

    def transform(self, hidden: Tensor) -> Tensor:
        x = self.projection(hidden)
        if self.activation is not None:
            x = self.activation(x)
        return self.norm(x) if self.norm is not None else x


class TiedShuffleHead(TiedHead):
    """Tied, after a parameter-free permutation of the dimensions.

    ``half_swap``: [w[d/2:], w[:d/2]]. ``channel_shuffle``: reshape (g, d/g), transpose, flatten
    (ShuffleNet). Either way the permuted w_i is nearly orthogonal to w_i at init.
    """

    def __init__(self, config: TransformerConfig) -> None:
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


#: One class per name in ``tiedemb.nn.config.HEAD_NAMES``, which validates ``model.head`` (and the
#: shuffle settings) before anything here is built.
HEADS: dict[str, type[OutputHead]] = {
    "untied": UntiedHead,
    "tied": TiedHead,
    "tied_scaled_init": TiedScaledInitHead,
    "tied_orth": TiedOrthHead,
    "tied_shuffle": TiedShuffleHead,
}


def build_head(config: TransformerConfig) -> OutputHead:
    return HEADS[config.head](config)
