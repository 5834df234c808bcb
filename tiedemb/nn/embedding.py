"""Token + position + segment embeddings of width d_e, projected to the hidden size.

This is ALBERT's factorised embedding: with d_e < hidden the n x d_e token table is the
only vocabulary-sized matrix, and a bias-free d_e -> hidden projection lifts it.
"""

from __future__ import annotations

from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.dropout import Dropout
from tiedemb.nn.layers import make_norm


class Embedding(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        d_e = config.embedding_dim
        self.token = nn.Embedding(config.vocab_size, d_e)
        # Rotary and position-free models add nothing to the input: rotary acts inside attention.
        self.position = nn.Embedding(config.max_position_embeddings, d_e) if config.position == "learned" else None
        self.segment = nn.Embedding(config.type_vocab_size, d_e) if config.type_vocab_size > 0 else None
        self.projection = nn.Linear(d_e, config.hidden_size, bias=False) if config.projected else None
        # Without the norm, input scales (Gemma's sqrt(d), T5's unit-std table) reach the residual
        # stream as they are; with it they only change the token's share of the normalised sum.
        self.norm = (
            make_norm(config.norm, config.hidden_size, config.norm_eps) if config.embedding_norm else nn.Identity()
        )
        self.dropout = Dropout(config.dropout)
        # Gemma's sqrt(d) multiplier, a plain number: no parameter, so checkpoints are unchanged.
        self.token_scale = config.token_scale

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        x = self.token(input_ids)  # (B, T, d_e)
        if self.token_scale != 1.0:
            x = x * self.token_scale
        if self.position is not None:
            length = input_ids.shape[1]
            if length > self.position.num_embeddings:
                raise ValueError(
                    f"sequence length {length} exceeds model.max_position_embeddings ({self.position.num_embeddings})"
                )
            x = x + self.position.weight[:length]
        if self.segment is not None:
            if token_type_ids is None:
                x = x + self.segment.weight[0]
            else:
                x = x + self.segment(token_type_ids)
        if self.projection is not None:
            x = self.projection(x)  # (B, T, hidden)
        return self.dropout(self.norm(x))
