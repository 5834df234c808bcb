"""A next-token tiedemb model in transformers' GPT-NeoX layout, or the setting that stands in the way.

Pure: a ``TransformerConfig`` and a checkpoint's weights (``model.`` prefix removed) in;
``GPTNeoXConfig`` keywords and a state dict in ``GPTNeoXForCausalLM``'s names out.
``tiedemb.weights.export_plan.plan_export`` puts them together. GPT-NeoX normalises with LayerNorm
before each branch and after the last block, as tiedemb's pre-norm encoder does, here with
sequential residuals (``use_parallel_residual=False``) and every head dimension rotated
(``rotary_pct=1``; 0 without positions).

Exactness rests on these identities:

* Rotary positions: tiedemb rotates the whole head in the rotate-half form (dimension i pairs with
  i + head_dim/2, at frequency base^(-2i/head_dim)), which is what GPT-NeoX computes, so queries and
  keys keep their order within each head. GPT-NeoX's fused projection holds [q_h, k_h, v_h] head
  after head where tiedemb's holds all queries, then all keys, then all values: its rows are
  regrouped, not permuted within a head.
* The input: with rotary or no positions the embedding adds nothing that depends on the position
  (pretraining batches carry no token types, so a segment table adds its row 0 to every token),
  so norm(P (s E[t] + S[0])) is a function of the token alone and is the exported input table.
* The output: every head whose transform is linear (a projection, a permutation, a scale: all
  but tied_orth's bias, activation and norm) gives logits D F h, with F the transform's matrix,
  read off by applying tiedemb's own head to the identity. D F is the exported output matrix,
  tied to the input table only where the two are equal.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.heads import build_head
from tiedemb.nn.model import Embedding
from tiedemb.weights.bert import HIDDEN_ACTS, LEAVES, leaf_names, renamed, shared_config

NEOX = "GPTNeoXForCausalLM"
NEOX_CONFIG = "GPTNeoXConfig"
OUTPUT_WEIGHT = "lm_head.weight"
NO_CAUSAL_CLASS = "transformers' GPTNeoXForCausalLM does not hold it exactly"


# --------------------------------------------------------------------------- which settings fit


def causal_problem(config: TransformerConfig) -> str | None:
    """The first setting GPT-NeoX does not reproduce exactly, or ``None``."""
    if not config.causal:
        return f"model.objective={config.objective!r}: the model attends both ways, a causal LM only to earlier tokens"
    if config.norm_position != "pre":
        return "model.norm_position='post': GPT-NeoX normalises before each branch (pre)"
    if config.activation not in HIDDEN_ACTS:
        return f"model.activation={config.activation!r} is none of GPT-NeoX's ({', '.join(HIDDEN_ACTS)})"
    if config.position == "learned":
        return "model.position='learned': GPT-NeoX has rotary positions, no position table"
    if config.norm != "layernorm":
        return f"model.norm={config.norm!r}: GPT-NeoX's norms are LayerNorm"
    return head_problem(config)


def head_problem(config: TransformerConfig) -> str | None:
    """The first head setting that keeps the logits from being one matrix times the final state."""
    between = "between the encoder and the output matrix cannot be multiplied into it"
    if config.head_activation != "none":
        return f"model.head_activation={config.head_activation!r}: an activation {between}"
    if config.head_norm:
        return f"model.head_norm=true: a norm {between}"
    if config.head_bias:
        return (
            "model.head_bias=true: the head's bias becomes a vocabulary-sized output bias, and GPT-NeoX's "
            "output layer has none"
        )
    if config.output_bias:
        return "model.output_bias=true: GPT-NeoX's output layer has no bias"
    return None


# --------------------------------------------------------------------------- the folded input and output


def loaded(module: nn.Module, inner: Mapping[str, Tensor], prefix: str, **extra: Tensor) -> nn.Module:
    """``module`` holding the weights under ``prefix`` (and ``extra``), in float64, for evaluation."""
    part = {key.removeprefix(prefix): value for key, value in inner.items() if key.startswith(prefix)}
    module.load_state_dict({**part, **extra})
    return module.double().eval()


def input_table(inner: Mapping[str, Tensor], config: TransformerConfig) -> Tensor:
    """Each token's input vector (vocab, hidden), float64: tiedemb's embedding of the token alone (the
    models GPT-NeoX holds have no position table)."""
    embedding = loaded(Embedding(config), inner, "embedding.")
    embedding.position = None
    with torch.no_grad():
        return embedding(torch.arange(config.vocab_size).unsqueeze(1)).squeeze(1)


def output_matrix(inner: Mapping[str, Tensor], config: TransformerConfig) -> Tensor:
    """The head multiplied out (vocab, hidden), float64: logits = this times the final state.

    Applying tiedemb's own head to the identity reads off its transform's matrix (row i: what it
    makes of e_i), projection, permutation and readout scale included; ``head_problem`` has refused
    every head for which that is not the whole story.
    """
    head = build_head(config)
    tie = {"decoder.weight": inner["embedding.token.weight"]} if head.tied else {}
    head = loaded(head, inner, "head.", **tie)
    with torch.no_grad():
        transform = head.features(torch.eye(config.hidden_size, dtype=torch.float64))  # (hidden, width)
        return head.decoder.weight @ transform.T


# --------------------------------------------------------------------------- the encoder's weights

#: tiedemb's block modules -> GPT-NeoX's; the fused attention input is regrouped apart.
NEOX_BLOCK_NAMES = {
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attention.out": "attention.dense",
    "ffn.up": "mlp.dense_h_to_4h",
    "ffn.down": "mlp.dense_4h_to_h",
}


def causal_state(inner: Mapping[str, Tensor], config: TransformerConfig) -> tuple[dict[str, Tensor], bool]:
    """The model's weights named for ``GPTNeoXForCausalLM``, and whether its output matrix is its input
    table (then the state leaves it out and the export ties them)."""
    table, output = input_table(inner, config).float(), output_matrix(inner, config).float()
    modules = {"encoder.final_norm": "gpt_neox.final_layer_norm"}
    for index in range(config.num_layers):
        modules.update(
            {
                f"encoder.blocks.{index}.{ours}": f"gpt_neox.layers.{index}.{theirs}"
                for ours, theirs in NEOX_BLOCK_NAMES.items()
            }
        )
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
    """``GPTNeoXConfig`` keywords for the model; no bos and eos ids (the export sets its tokenizer's,
    when there is one)."""
    return dict(
        shared_config(config),
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
