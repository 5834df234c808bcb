"""A next-token tiedemb checkpoint's settings and weights as transformers' GPT-NeoX, or why they do not fit.

GPT-NeoX (pre-norm, sequential residuals, every head dimension rotated) holds it exactly: tiedemb
rotates in the rotate-half form as GPT-NeoX does, so only the fused qkv rows are regrouped head by
head. With rotary or no positions the embedding is a function of the token alone, which is the
exported input table; every linear head gives logits D F h, with F read off by applying tiedemb's
head to the identity, so D F is the output matrix (tied where it equals the input table).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from tiedemb.errors import UserError
from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.heads import build_head
from tiedemb.nn.model import Embedding
from tiedemb.weights.bert import HIDDEN_ACTS, LEAVES, layer_names, leaf_names, renamed
from tiedemb.weights.source import config_from_hparams

NEOX = "GPTNeoXForCausalLM"
OUTPUT_WEIGHT = "lm_head.weight"


@dataclass
class ExportPlan:
    """What to build and save: ``GPTNeoXConfig``'s keywords and the state dict in its names."""

    config: dict[str, Any]
    state: dict[str, Tensor] = field(repr=False)


def causal_problem(config: TransformerConfig) -> str | None:
    """The first setting GPT-NeoX does not reproduce exactly, or ``None``; the head must leave the
    logits one matrix times the final state."""
    between = "between the encoder and the output matrix cannot be multiplied into it"
    checks = (
        (config.norm_position == "pre", "model.norm_position='post': GPT-NeoX normalises before each branch (pre)"),
        (
            config.activation in HIDDEN_ACTS,
            f"model.activation={config.activation!r} is none of GPT-NeoX's ({', '.join(HIDDEN_ACTS)})",
        ),
        (config.position != "learned", "model.position='learned': GPT-NeoX has rotary positions, no position table"),
        (config.norm == "layernorm", f"model.norm={config.norm!r}: GPT-NeoX's norms are LayerNorm"),
        (
            config.head_activation == "none",
            f"model.head_activation={config.head_activation!r}: an activation {between}",
        ),
        (not config.head_norm, f"model.head_norm=true: a norm {between}"),
        (
            not config.head_bias,
            "model.head_bias=true: the head's bias becomes a vocabulary-sized output bias, and GPT-NeoX's "
            "output layer has none",
        ),
        (not config.output_bias, "model.output_bias=true: GPT-NeoX's output layer has no bias"),
    )
    return next((problem for fits, problem in checks if not fits), None)


def loaded(module: nn.Module, inner: Mapping[str, Tensor], prefix: str, **extra: Tensor) -> nn.Module:
    """``module`` holding the weights under ``prefix`` (and ``extra``), in float64, for evaluation."""
    part = {key.removeprefix(prefix): value for key, value in inner.items() if key.startswith(prefix)}
    module.load_state_dict({**part, **extra})
    return module.double().eval()


def input_table(inner: Mapping[str, Tensor], config: TransformerConfig) -> Tensor:
    """Each token's input vector (vocab, hidden), float64: tiedemb's embedding of the token alone."""
    embedding = loaded(Embedding(config), inner, "embedding.")
    embedding.position = None
    with torch.no_grad():
        return embedding(torch.arange(config.vocab_size).unsqueeze(1)).squeeze(1)


def output_matrix(inner: Mapping[str, Tensor], config: TransformerConfig) -> Tensor:
    """The head multiplied out (vocab, hidden), float64: logits = this times the final state (the head
    applied to the identity reads off its transform's matrix; ``head_problem`` refused the others)."""
    head = build_head(config)
    tie = {"decoder.weight": inner["embedding.token.weight"]} if head.tied else {}
    head = loaded(head, inner, "head.", **tie)
    with torch.no_grad():
        transform = head.features(torch.eye(config.hidden_size, dtype=torch.float64))  # (hidden, width)
        return head.decoder.weight @ transform.T


#: tiedemb's block modules -> GPT-NeoX's; the fused attention input is regrouped apart.
NEOX_BLOCK_NAMES = {
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attention.out": "attention.dense",
    "ffn.up": "mlp.dense_h_to_4h",
    "ffn.down": "mlp.dense_4h_to_h",
}


def causal_state(inner: Mapping[str, Tensor], config: TransformerConfig) -> tuple[dict[str, Tensor], bool]:
    """The model's weights named for ``GPTNeoXForCausalLM``, and whether its output matrix is its input table."""
    table, output = input_table(inner, config).float(), output_matrix(inner, config).float()
    modules = {
        "encoder.final_norm": "gpt_neox.final_layer_norm",
        **layer_names(config.num_layers, NEOX_BLOCK_NAMES, "encoder.blocks", "gpt_neox.layers"),
    }
    state = {"gpt_neox.embed_in.weight": table, **renamed(inner, leaf_names(modules))}
    for index, leaf in itertools.product(range(config.num_layers), LEAVES):
        # (3, heads, head_dim, ...) -> (heads, 3, head_dim, ...)
        fused = inner[f"encoder.blocks.{index}.attention.qkv.{leaf}"].float()
        grouped = fused.view(3, config.num_heads, config.head_dim, *fused.shape[1:]).transpose(0, 1)
        state[f"gpt_neox.layers.{index}.attention.query_key_value.{leaf}"] = grouped.reshape(fused.shape).contiguous()
    tied = torch.equal(table, output)
    if not tied:
        state[OUTPUT_WEIGHT] = output
    return state, tied


def causal_config(config: TransformerConfig, tied: bool) -> dict[str, Any]:
    """``GPTNeoXConfig`` keywords for the model; the export sets its tokenizer's bos and eos ids."""
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=config.activation,
        max_position_embeddings=config.max_position_embeddings,
        initializer_range=config.init_std,
        layer_norm_eps=config.norm_eps,
        pad_token_id=config.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=tied,
        attention_dropout=config.attention_dropout,
        attention_bias=True,
        use_parallel_residual=False,
        hidden_dropout=config.dropout,
        rotary_pct=1.0 if config.position == "rope" else 0.0,
        rotary_emb_base=config.rope_base,
    )


def plan_export(hparams: Mapping[str, Any], state: Mapping[str, Tensor], kind: str, origin: str) -> ExportPlan:
    """Everything ``python -m tiedemb.export`` writes but the tokenizer and the model card, or a ``UserError``.

    ``kind``: "glue" or "pretrain" (``checkpoint_kind``); only a next-token pretraining model exports.
    """
    config = config_from_hparams({**hparams, "objective": hparams.get("objective") or "mlm"}, f"checkpoint {origin!r}")
    if kind != "pretrain" or not config.causal:
        model = "a GLUE classifier" if kind == "glue" else "a masked-LM model"
        raise UserError(
            f"checkpoint {origin!r} is {model}; only next-token models (model.objective=clm) export, as {NEOX}"
        )
    problem = causal_problem(config)
    if problem is not None:
        raise UserError(
            f"checkpoint {origin!r} cannot be exported to a causal LM: {problem}; "
            f"transformers' {NEOX} does not hold it exactly"
        )
    inner = {key.removeprefix("model."): value for key, value in state.items()}
    weights, tied = causal_state(inner, config)
    return ExportPlan(causal_config(config, tied), weights)
