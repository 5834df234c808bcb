"""The embedding's and encoder's initial values, and the order a whole model is drawn in.

Each head draws its own parts (``OutputHead.reset_parameters``) after the embedding: the plain
tied heads copy the embedding projection's transpose. Nothing here breaks the tie: it writes into
the shared Parameter.
"""

from __future__ import annotations

import torch
from torch import nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.embedding import Embedding
from tiedemb.nn.encoder import Encoder, deepnorm_beta, scaled_std


def init_norms(module: nn.Module) -> None:
    for norm in module.modules():
        if isinstance(norm, (nn.LayerNorm, nn.RMSNorm)):
            if norm.weight is not None:
                nn.init.ones_(norm.weight)
            if getattr(norm, "bias", None) is not None:
                nn.init.zeros_(norm.bias)


def init_linear(linear: nn.Linear, std: float, gain_xavier: float | None = None) -> None:
    if gain_xavier is not None:
        nn.init.xavier_normal_(linear.weight, gain=gain_xavier)
    elif std == 0.0:
        nn.init.zeros_(linear.weight)
    else:
        nn.init.normal_(linear.weight, mean=0.0, std=std)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


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
    branch_std = {"standard": std, "scaled": scaled_std(std, layers), "zero": 0.0, "deepnorm": std}[
        config.residual_init
    ]
    beta = deepnorm_beta(layers) if config.residual_init == "deepnorm" else None
    for block in encoder.blocks:
        attention, ffn = block.attention, block.ffn
        if beta is None:
            init_linear(attention.qkv, std)
            init_linear(attention.out, branch_std)
            init_linear(ffn.up, std)
            init_linear(ffn.down, branch_std)
        else:
            # DeepNorm: q and k keep gain 1; v, the output projection and the FFN get gain beta.
            hidden = config.hidden_size
            nn.init.xavier_normal_(attention.qkv.weight[: 2 * hidden], gain=1.0)
            nn.init.xavier_normal_(attention.qkv.weight[2 * hidden :], gain=beta)
            nn.init.zeros_(attention.qkv.bias)
            init_linear(attention.out, std, gain_xavier=beta)
            init_linear(ffn.up, std, gain_xavier=beta)
            init_linear(ffn.down, std, gain_xavier=beta)
    init_norms(encoder)


def init_transformer(model: nn.Module, config: TransformerConfig) -> None:
    """Initialise a ``Transformer`` (embedding, encoder, head) as the config says.

    The head decides the token table's std (``OutputHead.token_std``) and draws its own parts.
    """
    token_std = model.head.token_std(
        vocab_size=config.vocab_size,
        embedding_dim=config.embedding_dim,
        init_std=config.init_std,
        embedding_init_std=config.embedding_init_std,
    )
    init_embedding(model.embedding, config, token_std)
    init_encoder(model.encoder, config)
    model.head.reset_parameters(model.embedding)
