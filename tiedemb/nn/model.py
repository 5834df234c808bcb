"""The whole language model, top to bottom: Embedding -> Block x L -> Encoder -> Transformer.

The tie is ``Transformer.tie_weights`` (one Parameter, two uses); every parameter is drawn in section 5
(each head draws its own parts). The CPU speed path is ``tiedemb.nn.fast``. Labels follow Hugging
Face's convention (-100 where no loss).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.fast.dropout import Dropout
from tiedemb.nn.fast.sliced_loss import linear_cross_entropy
from tiedemb.nn.heads import build_head
from tiedemb.nn.layers import ACTIVATION_FUNCTIONS, IGNORE_INDEX, init_linear, init_norms, make_norm

# Which positions the last block finishes (a masked LM's loss reads ~15%, a classifier [CLS] alone):
# all (None), flat B * T indices, or one position of every sequence (an int). Every position still
# feeds attention as keys and values.
Positions = Tensor | int | None


def take_rows(x: Tensor, positions: Positions) -> Tensor:
    """(B, T, hidden) -> (len(positions), hidden), or (B, hidden) for an int; x itself for None."""
    if positions is None:
        return x
    if isinstance(positions, int):
        return x[:, positions]
    return x.reshape(-1, x.shape[-1]).index_select(0, positions)


# -- 1. embedding ----------------------------------------------------------------------------------


class Embedding(nn.Module):
    """Token + position + segment embeddings of width d_e, lifted to the hidden size by a bias-free
    projection (with d_e < hidden the n x d_e token table is the only vocabulary-sized matrix)."""

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
        if self.position is not None:  # longer data is refused before training (training/run_checks.py)
            x = x + self.position.weight[: input_ids.shape[1]]
        if self.segment is not None:
            x = x + (self.segment.weight[0] if token_type_ids is None else self.segment(token_type_ids))
        if self.projection is not None:
            x = self.projection(x)  # (B, T, hidden)
        return self.dropout(self.norm(x))


# -- 2. the block ------------------------------------------------------------------------------------


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

    def forward(self, x: Tensor, attention_mask: Tensor | None, positions: Positions = None) -> Tensor:
        """(B, T, hidden) -> (B, T, hidden), or ``take_rows`` of it at ``positions``."""
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
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, dropout_p=dropout, is_causal=self.causal and attention_mask is None
        )
        return self.out(take_rows(y.transpose(1, 2).reshape(batch, length, hidden), positions))


class FeedForward(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.activation(self.up(x)))


class Block(nn.Module):
    """``norm_position="pre"``: x + f(norm(x)) (GPT-2, most modern models).
    ``norm_position="post"``: norm(x + f(x)) (BERT)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attention_norm = make_norm(config.norm, config.hidden_size, config.norm_eps)
        self.attention = SelfAttention(config)
        self.ffn_norm = make_norm(config.norm, config.hidden_size, config.norm_eps)
        self.ffn = FeedForward(config)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: Tensor, attention_mask: Tensor | None, positions: Positions = None) -> Tensor:
        """Everything after attention runs on ``positions`` only."""
        if self.pre_norm:
            x = take_rows(x, positions) + self.dropout(
                self.attention(self.attention_norm(x), attention_mask, positions)
            )
            return x + self.dropout(self.ffn(self.ffn_norm(x)))
        x = self.attention_norm(take_rows(x, positions) + self.dropout(self.attention(x, attention_mask, positions)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


# -- 3. the encoder ----------------------------------------------------------------------------------


class Encoder(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.causal = config.causal
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        # Pre-norm blocks leave the residual stream un-normalised: one norm after the last.
        self.final_norm = (
            make_norm(config.norm, config.hidden_size, config.norm_eps) if config.norm_position == "pre" else None
        )

    def forward(self, x: Tensor, attention_mask: Tensor | None = None, positions: Positions = None) -> Tensor:
        """(B, T, hidden) final states, or ``take_rows`` of them at ``positions`` (the last block's)."""
        # None when nothing is padded lets SDPA pick its fastest kernel. Causal models pad on the
        # right, so real tokens never see padding and is_causal alone is exact.
        mask = None
        if attention_mask is not None and not self.causal and not bool(attention_mask.all()):
            mask = attention_mask[:, None, None, :].bool()  # (B, 1, 1, T), True = attend
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            x = block(x, mask, positions if index == last else None)
        return self.final_norm(x) if self.final_norm is not None else x


# -- 4. the language model ---------------------------------------------------------------------------


@dataclass
class LMOutput:
    loss: Tensor | None
    logits: Tensor | None  # MLM: (num_masked, vocab); CLM: (B, T, vocab); None if not asked for
    num_targets: int = 0


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = Embedding(config)
        self.encoder = Encoder(config)
        self.head = build_head(config)
        self.tie_weights()
        init_transformer(self, config)

    def tie_weights(self) -> None:
        """One Parameter, two uses. Call again after anything that re-creates parameters
        (meta-device materialisation, sharding wrappers)."""
        if self.head.tied:
            self.head.decoder.weight = self.embedding.token.weight

    @property
    def is_tied(self) -> bool:
        return self.head.tied and self.head.decoder.weight is self.embedding.token.weight

    def encode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """(B, T, hidden), or ``take_rows`` of it at ``positions``."""
        return self.encoder(self.embedding(input_ids, token_type_ids), attention_mask, positions)

    def scored_positions(self, labels: Tensor) -> tuple[Tensor | None, Tensor]:
        """Which positions the loss reads (flat B * T indices; None: all) and each one's target.

        Next-token: the labels shift left rather than the logits right (which would copy the logits
        and their gradient once more). Masked-token: the last block finishes only the masked positions.
        """
        if self.config.causal:
            return None, F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX).reshape(-1)
        positions = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
        return positions, labels.reshape(-1)[positions]

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        *,
        return_logits: bool = True,
    ) -> LMOutput:
        """``return_logits=False`` (with labels): the loss alone, computed without materialising
        the logits (``linear_cross_entropy``); ``logits`` is then None."""
        if labels is None:
            return LMOutput(loss=None, logits=self.head(self.encode(input_ids, attention_mask, token_type_ids)))
        positions, targets = self.scored_positions(labels)
        hidden = self.encode(input_ids, attention_mask, token_type_ids, positions=positions)
        hidden = hidden.reshape(-1, hidden.shape[-1])  # (scored positions, hidden)
        num_targets = int((targets != IGNORE_INDEX).sum())  # after the encoder is queued: a GPU sync
        if not return_logits and num_targets > 0:
            head = self.head
            loss = linear_cross_entropy(head.features(hidden), head.decoder.weight, head.bias, targets)
            return LMOutput(loss=loss, logits=None, num_targets=num_targets)
        logits = self.head(hidden)  # (scored positions, vocab)
        if num_targets == 0:
            loss = logits.sum() * 0.0  # keeps the graph, contributes nothing
        else:
            loss = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)
        if self.config.causal:
            logits = logits.view(*labels.shape, -1)  # (B, T, vocab)
        return LMOutput(loss=loss, logits=logits, num_targets=num_targets)


# -- 5. initialisation -------------------------------------------------------------------------------


def init_transformer(model: Transformer, config: TransformerConfig) -> None:
    """Embedding, encoder, then the head, which decides the token table's std (for a tied head the
    shared matrix) and draws its own parts. Writing into the shared Parameter keeps the tie."""
    token_std = model.head.token_std(
        vocab_size=config.vocab_size,
        embedding_dim=config.embedding_dim,
        init_std=config.init_std,
        embedding_init_std=config.embedding_init_std,
    )
    init_embedding(model.embedding, config, token_std)
    init_encoder(model.encoder, config)
    model.head.reset_parameters(model.embedding)


@torch.no_grad()
def init_embedding(embedding: Embedding, config: TransformerConfig, token_std: float) -> None:
    nn.init.normal_(embedding.token.weight, std=token_std)
    for table in (embedding.position, embedding.segment):
        if table is not None:
            nn.init.normal_(table.weight, std=config.init_std)
    if embedding.projection is not None:
        nn.init.xavier_uniform_(embedding.projection.weight)
    init_norms(embedding)


@torch.no_grad()
def init_encoder(encoder: Encoder, config: TransformerConfig) -> None:
    """``residual_init`` decides how far from the identity each residual branch starts."""
    std, layers = config.init_std, config.num_layers
    # GPT-2's "scaled": residual branch output projections shrink with depth.
    branch_std = {"standard": std, "scaled": std / math.sqrt(2.0 * layers), "zero": 0.0}[config.residual_init]
    for block in encoder.blocks:
        init_linear(block.attention.qkv, std)
        init_linear(block.attention.out, branch_std)
        init_linear(block.ffn.up, std)
        init_linear(block.ffn.down, branch_std)
    init_norms(encoder)
