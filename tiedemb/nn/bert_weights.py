"""BERT weights in transformers' layout -> tiedemb's Embedding / Encoder parameter names.

tiedemb's post-norm encoder with learned positions and segments is BERT's architecture; only
the names differ, and tiedemb fuses the query, key and value projections into one matrix
(``qkv`` = rows of q, then k, then v, which is how ``SelfAttention`` splits its output). The
functions here are pure: a config mapping in, field values out; a state dict in, a state
dict out. Reading files is the caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from tiedemb.errors import UserError

#: transformers' ``hidden_act`` names -> tiedemb activations with the same function.
#: "gelu" is the exact (erf) GELU in both; the tanh approximations are refused rather than
#: silently swapped, because outputs would then differ from the pretrained model's.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu"}

#: Per-layer parameters: transformers name (under ``encoder.layer.<i>.``) -> tiedemb name
#: (under ``encoder.blocks.<i>.``); q, k, v are handled apart because they are fused.
LAYER_NAMES = {
    "attention.output.dense": "attention.out",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
EMBEDDING_NAMES = {
    "embeddings.word_embeddings": "embedding.token",
    "embeddings.position_embeddings": "embedding.position",
    "embeddings.token_type_embeddings": "embedding.segment",
    "embeddings.LayerNorm": "embedding.norm",
}
POOLER_NAME = ("pooler.dense", "pooler")


def fields_from_bert_config(config: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """``TransformerConfig`` field values for a BERT config (``config.json`` as a mapping)."""
    model_type = config.get("model_type", "bert")
    if model_type != "bert":
        raise UserError(f"pretrained model {origin!r} is a {model_type!r} model; only the BERT architecture is supported")
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise UserError(
            f"pretrained model {origin!r} uses position_embedding_type={position_type!r}; only 'absolute' is supported"
        )
    activation = config.get("hidden_act", "gelu")
    if activation not in ACTIVATIONS:
        raise UserError(
            f"pretrained model {origin!r} uses hidden_act={activation!r}; supported: {', '.join(ACTIVATIONS)}"
        )
    return {
        "vocab_size": int(config["vocab_size"]),
        "hidden_size": int(config["hidden_size"]),
        "num_layers": int(config["num_hidden_layers"]),
        "num_heads": int(config["num_attention_heads"]),
        "intermediate_size": int(config["intermediate_size"]),
        "embedding_dim": int(config["hidden_size"]),
        "max_position_embeddings": int(config["max_position_embeddings"]),
        "position": "learned",
        "type_vocab_size": int(config.get("type_vocab_size", 2)),
        "norm": "layernorm",
        "norm_position": "post",
        "norm_eps": float(config.get("layer_norm_eps", 1e-12)),
        "activation": ACTIVATIONS[activation],
        "residual_init": "standard",
    }


def bert_to_tiedemb(state: Mapping[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Rename a ``BertModel`` state dict to tiedemb's ``embedding.*``, ``encoder.*``, ``pooler.*``.

    A leading ``bert.`` (how task models such as ``BertForMaskedLM`` save the encoder) is
    dropped; heads of such models are ignored. A missing encoder parameter is an error, a
    missing pooler is not (sentence-embedding exports often drop it).
    """
    state = {key.removeprefix("bert."): value for key, value in state.items()}
    out: dict[str, Tensor] = {}

    def take(source: str, target: str, required: bool = True) -> None:
        for leaf in ("weight", "bias"):
            key = f"{source}.{leaf}"
            if key in state:
                out[f"{target}.{leaf}"] = state[key]
            elif required and not (leaf == "bias" and source.endswith("_embeddings")):
                raise UserError(f"the BERT weights lack {key!r}; they are not a complete BertModel")

    for source, target in EMBEDDING_NAMES.items():
        take(source, target)
    for layer in range(num_layers):
        prefix, target = f"encoder.layer.{layer}.", f"encoder.blocks.{layer}."
        for source, name in LAYER_NAMES.items():
            take(prefix + source, target + name)
        for leaf in ("weight", "bias"):
            parts = [f"{prefix}attention.self.{part}.{leaf}" for part in ("query", "key", "value")]
            missing = [key for key in parts if key not in state]
            if missing:
                raise UserError(f"the BERT weights lack {missing[0]!r}; they are not a complete BertModel")
            out[f"{target}attention.qkv.{leaf}"] = torch.cat([state[key] for key in parts], dim=0)
    take(*POOLER_NAME, required=False)
    return out
