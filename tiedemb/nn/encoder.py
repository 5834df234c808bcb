"""Transformer encoder blocks on ``scaled_dot_product_attention``.

``norm_position="pre"``: x + f(norm(x)), with a final norm (GPT-2, most modern models).
``norm_position="post"``: norm(alpha * x + f(x)) (BERT; DeepNorm when alpha > 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.dropout import Dropout, attention
from tiedemb.nn.layers import ACTIVATION_FUNCTIONS, make_norm

Rows = Tensor | int | None
"""Which positions a block finishes: all (None), flat B * T indices, or one position of every sequence."""


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half form), applied to queries and keys."""

    def __init__(self, head_dim: int, max_positions: int, base: float) -> None:
        super().__init__()
        inverse_frequency = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inverse_frequency)
        angles = torch.cat((angles, angles), dim=-1)  # (T, head_dim)
        # Derived from the config, so not saved in checkpoints.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:  # x: (B, heads, T, head_dim)
        length = x.shape[-2]
        cos, sin = self.cos[:length].to(x.dtype), self.sin[:length].to(x.dtype)
        first, second = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-second, first), dim=-1) * sin


class SelfAttention(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)  # fused: one matmul for q, k, v
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = config.attention_dropout
        self.causal = config.causal
        self.rotary = (
            Rotary(config.head_dim, config.max_position_embeddings, config.rope_base)
            if config.position == "rope"
            else None
        )

    def forward(self, x: Tensor, attention_mask: Tensor | None, rows: Rows = None) -> Tensor:
        """``rows``: flat (B * T) indices of the only positions whose output is wanted, or one
        position (an int) of every sequence; keys and values still come from every position, and
        the result is (len(rows), hidden), or (B, hidden) for an int."""
        batch, length, hidden = x.shape
        # Split, then view each part as (B, heads, T, head_dim): the backward is one concatenation
        # into the fused layout, where unbinding a permuted (3, B, heads, T, head_dim) view costs a
        # stack and a further copy.
        q, k, v = (
            part.view(batch, length, self.num_heads, hidden // self.num_heads).transpose(1, 2)
            for part in self.qkv(x).split(hidden, dim=-1)
        )
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        dropout = self.dropout if self.training else 0.0
        if isinstance(rows, int):
            # One query per sequence (a classifier's [CLS]): the attention of that query alone.
            q = q[:, :, rows : rows + 1]
            if self.causal:  # the query at `rows` sees keys up to itself
                attention_mask = (torch.arange(length, device=x.device) <= rows).expand(1, 1, 1, length)
            y = attention(q, k, v, attention_mask, dropout, is_causal=False)
            return self.out(y.reshape(batch, hidden))  # (B, heads, 1, head_dim) -> (B, hidden)
        y = attention(q, k, v, attention_mask, dropout, is_causal=self.causal and attention_mask is None)
        return self.out(take_rows(y.transpose(1, 2).reshape(batch, length, hidden), rows))


class FeedForward(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.activation(self.up(x)))


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attention_norm = make_norm(config.norm, config.hidden_size, config.norm_eps)
        self.attention = SelfAttention(config)
        self.ffn_norm = make_norm(config.norm, config.hidden_size, config.norm_eps)
        self.ffn = FeedForward(config)
        self.dropout = Dropout(config.dropout)
        # DeepNorm up-weights the residual stream so that post-norm stays stable when deep.
        self.alpha = (2.0 * config.num_layers) ** 0.25 if config.residual_init == "deepnorm" else 1.0

    def forward(self, x: Tensor, attention_mask: Tensor | None, rows: Rows = None) -> Tensor:
        """``rows``: as for ``SelfAttention``; everything after attention runs on those rows only."""
        if self.pre_norm:
            x = take_rows(x, rows) + self.dropout(self.attention(self.attention_norm(x), attention_mask, rows))
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        x = self.attention_norm(
            self.residual(take_rows(x, rows)) + self.dropout(self.attention(x, attention_mask, rows))
        )
        return self.ffn_norm(self.residual(x) + self.dropout(self.ffn(x)))

    def residual(self, x: Tensor) -> Tensor:
        # alpha is 1 except under DeepNorm; multiplying by 1 would still copy the residual stream.
        return x if self.alpha == 1.0 else self.alpha * x


class Encoder(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.causal = config.causal
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.final_norm = (
            make_norm(config.norm, config.hidden_size, config.norm_eps) if config.norm_position == "pre" else None
        )

    def forward(self, x: Tensor, attention_mask: Tensor | None = None, rows: Rows = None) -> Tensor:
        """(B, T, hidden) states; with ``rows`` (flat B * T indices) only those positions' final
        states, (len(rows), hidden); with an int, that position's of every sequence, (B, hidden).
        Every position still feeds attention in every block, so those rows are exactly what the
        full output would hold there; the last block simply skips the attention output projection,
        feed-forward and norms of the positions nobody reads (for MLM, the 85% that are not masked;
        for a classifier all but [CLS], whose query alone then attends)."""
        mask = self.attention_bias(attention_mask, x.dtype)
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            x = block(x, mask, rows if index == last else None)
        if rows is not None and not self.blocks:
            x = take_rows(x, rows)
        return self.final_norm(x) if self.final_norm is not None else x

    def attention_bias(self, attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
        """The mask SDPA gets: None when nothing is padded (lets it pick its fastest kernel).

        Causal models pad on the right, so real tokens never see padding and is_causal alone is exact.
        """
        if attention_mask is None or self.causal or bool(attention_mask.all()):
            return None
        return attention_mask[:, None, None, :].bool()  # (B, 1, 1, T), True = attend


def take_rows(x: Tensor, rows: Rows) -> Tensor:
    """(B, T, hidden) -> (len(rows), hidden) at flat positions ``rows``, (B, hidden) at position
    ``rows`` of every sequence when it is an int; x itself when None."""
    if rows is None:
        return x
    if isinstance(rows, int):
        return x[:, rows]
    return x.reshape(-1, x.shape[-1]).index_select(0, rows)


def deepnorm_beta(num_layers: int) -> float:
    """DeepNorm's init gain for branch weights in an encoder of ``num_layers`` blocks."""
    return (8.0 * num_layers) ** -0.25


def scaled_std(init_std: float, num_layers: int) -> float:
    """GPT-2 style: residual branch output projections shrink with depth."""
    return init_std / math.sqrt(2.0 * num_layers)
