"""A next-token tiedemb model in a transformers causal-LM layout, or the setting that stands in the way.

Pure: a ``TransformerConfig`` and a checkpoint's weights (``model.`` prefix removed) in; the class,
its config keywords and a state dict in its names out. ``tiedemb.weights.export_plan.plan_export``
puts them together. Every class here normalises before each branch and after the last block, as
tiedemb's pre-norm encoder does; which one holds a model follows from its norm and positions:

* LayerNorm with rotary or no positions: ``GPTNeoXForCausalLM`` with sequential residuals
  (``use_parallel_residual=False``), every head dimension rotated (``rotary_pct=1``; 0 without
  positions).
* RMSNorm with rotary positions: ``LlamaForCausalLM`` with biases on attention and MLP.
* LayerNorm with a learned position table and no embedding norm: ``GPT2LMHeadModel``.

Exactness rests on these identities:

* Rotary positions: tiedemb rotates the whole head in the rotate-half form (dimension i pairs with
  i + head_dim/2, at frequency base^(-2i/head_dim)), which is what GPT-NeoX and Llama compute, so
  queries and keys keep their order within each head. GPT-NeoX's fused projection holds
  [q_h, k_h, v_h] head after head where tiedemb's holds all queries, then all keys, then all
  values: its rows are regrouped, not permuted within a head.
* The input: with rotary or no positions the embedding adds nothing that depends on the position
  (pretraining batches carry no token types, so a segment table adds its row 0 to every token),
  so norm(P (s E[t] + S[0])) is a function of the token alone and is the exported input table.
  With learned positions and no embedding norm, P (s E[t] + S[0]) and P pos[i] are GPT-2's token
  and position tables; behind an embedding norm a position vector cannot be split off.
* The output: every head whose transform is linear (a projection, a permutation, a scale: all
  but tied_orth's bias, activation and norm) gives logits D F h, with F the transform's matrix,
  read off by applying tiedemb's own head to the identity. D F is the exported output matrix,
  tied to the input table only where the two are equal.
* Llama's MLP is gated, down(act(gate x) * up x); tiedemb's, down(act(up x)), is that with
  tiedemb's up matrix as the gate and up x a constant 1 (weight zero, bias one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.heads import build_head
from tiedemb.nn.model import Embedding
from tiedemb.weights.bert import HIDDEN_ACTS, copied

NEOX = "GPTNeoXForCausalLM"
LLAMA = "LlamaForCausalLM"
GPT2 = "GPT2LMHeadModel"
CAUSAL_CLASSES = (NEOX, LLAMA, GPT2)
CONFIG_CLASSES = {NEOX: "GPTNeoXConfig", LLAMA: "LlamaConfig", GPT2: "GPT2Config"}
NAMES = {NEOX: "GPT-NeoX", LLAMA: "Llama", GPT2: "GPT-2"}
OUTPUT_WEIGHT = "lm_head.weight"
NO_CAUSAL_CLASS = "no transformers causal-LM class (GPT-NeoX, Llama, GPT-2) holds it exactly"


# --------------------------------------------------------------------------- which settings fit


def causal_problem(config: TransformerConfig) -> str | None:
    """The first setting that none of the causal-LM classes reproduces exactly, or ``None``."""
    if not config.causal:
        return f"model.objective={config.objective!r}: the model attends both ways, a causal LM only to earlier tokens"
    if config.norm_position != "pre":
        return "model.norm_position='post': GPT-NeoX, Llama and GPT-2 normalise before each branch (pre)"
    if config.activation not in HIDDEN_ACTS:
        return f"model.activation={config.activation!r} is none of theirs ({', '.join(HIDDEN_ACTS)})"
    if config.position == "learned" and config.norm != "layernorm":
        return (
            f"model.norm={config.norm!r} with model.position='learned': GPT-2, the causal LM with a learned "
            "position table, normalises with LayerNorm"
        )
    if config.position == "learned" and config.embedding_norm:
        return (
            "model.embedding_norm=true with model.position='learned': the position vector is added before the "
            "embedding norm, and GPT-2 has no embedding norm to hold it"
        )
    if config.position == "none" and config.norm != "layernorm":
        return (
            f"model.position='none' with model.norm={config.norm!r}: Llama rotates every query and key, and "
            "GPT-NeoX normalises with LayerNorm"
        )
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
            "model.head_bias=true: the head's bias becomes a vocabulary-sized output bias, and the causal-LM "
            "classes' output layer has none"
        )
    if config.output_bias:
        return "model.output_bias=true: the causal-LM classes' output layer has no bias"
    return None


def causal_class(config: TransformerConfig) -> str:
    """The class that holds a model ``causal_problem`` accepts."""
    if config.position == "learned":
        return GPT2
    return LLAMA if config.norm == "rmsnorm" else NEOX


def class_mismatch(config: TransformerConfig, requested: str) -> str | None:
    """Why ``requested`` cannot hold a model ``causal_problem`` accepts (``None``: it is the one that can)."""
    if requested == causal_class(config):
        return None
    name = NAMES[requested]
    if requested == GPT2:
        return f"model.position={config.position!r}: GPT-2 adds a learned position table"
    if config.position == "learned":
        return f"model.position='learned': {name} has rotary positions, no position table"
    if requested == LLAMA:
        return (
            "model.position='none': Llama rotates every query and key"
            if config.position == "none"
            else f"model.norm={config.norm!r}: Llama's norms are RMSNorm"
        )
    return f"model.norm={config.norm!r}: {name}'s norms are LayerNorm"


# --------------------------------------------------------------------------- the folded input and output


def loaded(module: nn.Module, inner: Mapping[str, Tensor], prefix: str, **extra: Tensor) -> nn.Module:
    """``module`` holding the weights under ``prefix`` (and ``extra``), in float64, for evaluation."""
    part = {key.removeprefix(prefix): value for key, value in inner.items() if key.startswith(prefix)}
    module.load_state_dict({**part, **extra})
    return module.double().eval()


def input_table(inner: Mapping[str, Tensor], config: TransformerConfig) -> Tensor:
    """Each token's input vector (vocab, hidden), float64: tiedemb's embedding of the token alone, without
    its position table (GPT-2 adds its own; the other classes' models have none)."""
    embedding = loaded(Embedding(config), inner, "embedding.")
    embedding.position = None
    with torch.no_grad():
        return embedding(torch.arange(config.vocab_size).unsqueeze(1)).squeeze(1)


def position_table(inner: Mapping[str, Tensor], config: TransformerConfig) -> Tensor:
    """The learned position table at the hidden width, float64: P pos."""
    embedding = loaded(Embedding(config), inner, "embedding.")
    with torch.no_grad():
        table = embedding.position.weight
        return embedding.projection(table) if embedding.projection is not None else table.clone()


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


def neox_block(inner: Mapping[str, Tensor], source: str, target: str, config: TransformerConfig) -> dict[str, Tensor]:
    state = copied(
        inner,
        source,
        target,
        {
            "attention_norm": "input_layernorm",
            "ffn_norm": "post_attention_layernorm",
            "attention.out": "attention.dense",
            "ffn.up": "mlp.dense_h_to_4h",
            "ffn.down": "mlp.dense_4h_to_h",
        },
    )
    for leaf in ("weight", "bias"):  # (3, heads, head_dim, ...) -> (heads, 3, head_dim, ...)
        fused = inner[f"{source}attention.qkv.{leaf}"].float()
        grouped = fused.view(3, config.num_heads, config.head_dim, *fused.shape[1:]).transpose(0, 1)
        state[f"{target}attention.query_key_value.{leaf}"] = grouped.reshape(fused.shape).contiguous()
    return state


def llama_block(inner: Mapping[str, Tensor], source: str, target: str, config: TransformerConfig) -> dict[str, Tensor]:
    state = copied(
        inner,
        source,
        target,
        {
            "attention_norm": "input_layernorm",
            "ffn_norm": "post_attention_layernorm",
            "attention.out": "self_attn.o_proj",
            "ffn.up": "mlp.gate_proj",
            "ffn.down": "mlp.down_proj",
        },
    )
    for leaf in ("weight", "bias"):
        parts = inner[f"{source}attention.qkv.{leaf}"].float().split(config.hidden_size)
        for name, part in zip(("q_proj", "k_proj", "v_proj"), parts):
            state[f"{target}self_attn.{name}.{leaf}"] = part.contiguous()
    state[f"{target}mlp.up_proj.weight"] = torch.zeros(config.intermediate_size, config.hidden_size)
    state[f"{target}mlp.up_proj.bias"] = torch.ones(config.intermediate_size)
    return state


def gpt2_block(inner: Mapping[str, Tensor], source: str, target: str, config: TransformerConfig) -> dict[str, Tensor]:
    # GPT-2's Conv1D keeps its matrices as (in, out): each linear layer's, transposed.
    return copied(
        inner,
        source,
        target,
        {
            "attention_norm": "ln_1",
            "ffn_norm": "ln_2",
            "attention.qkv": "attn.c_attn",
            "attention.out": "attn.c_proj",
            "ffn.up": "mlp.c_fc",
            "ffn.down": "mlp.c_proj",
        },
        lambda tensor: tensor.T.contiguous() if tensor.dim() == 2 else tensor,
    )


#: Per class: the input table, the blocks' prefix, one block's weights, the final norm.
LAYOUTS = {
    NEOX: ("gpt_neox.embed_in.weight", "gpt_neox.layers.", neox_block, "gpt_neox.final_layer_norm"),
    LLAMA: ("model.embed_tokens.weight", "model.layers.", llama_block, "model.norm"),
    GPT2: ("transformer.wte.weight", "transformer.h.", gpt2_block, "transformer.ln_f"),
}


def causal_state(
    inner: Mapping[str, Tensor], config: TransformerConfig, model_class: str
) -> tuple[dict[str, Tensor], bool]:
    """The model's weights named for ``model_class``, and whether its output matrix is its input
    table (then the state leaves it out and the export ties them)."""
    table_key, blocks, block, final_norm = LAYOUTS[model_class]
    table, output = input_table(inner, config).float(), output_matrix(inner, config).float()
    state = {table_key: table, **copied(inner, "encoder.", "", {"final_norm": final_norm})}
    for index in range(config.num_layers):
        state.update(block(inner, f"encoder.blocks.{index}.", f"{blocks}{index}.", config))
    if model_class == GPT2:
        state["transformer.wpe.weight"] = position_table(inner, config).float()
    tied = torch.equal(table, output)
    if not tied:
        state[OUTPUT_WEIGHT] = output
    return state, tied


def causal_config(config: TransformerConfig, model_class: str, tied: bool) -> dict[str, Any]:
    """Keywords of ``model_class``'s config for the model; no bos and eos ids (the export sets its
    tokenizer's, when there is one)."""
    shared = dict(
        vocab_size=config.vocab_size,
        initializer_range=config.init_std,
        pad_token_id=config.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=tied,
    )
    if model_class == GPT2:
        return dict(
            shared,
            n_embd=config.hidden_size,
            n_layer=config.num_layers,
            n_head=config.num_heads,
            n_inner=config.intermediate_size,
            n_positions=config.max_position_embeddings,
            activation_function=HIDDEN_ACTS[config.activation],
            layer_norm_epsilon=config.norm_eps,
            resid_pdrop=config.dropout,
            embd_pdrop=config.dropout,
            attn_pdrop=config.attention_dropout,
        )
    shared.update(
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=HIDDEN_ACTS[config.activation],
        max_position_embeddings=config.max_position_embeddings,
        attention_dropout=config.attention_dropout,
        attention_bias=True,
    )
    if model_class == LLAMA:
        return dict(
            shared,
            num_key_value_heads=config.num_heads,
            head_dim=config.head_dim,
            rms_norm_eps=config.norm_eps,
            rope_theta=config.rope_base,
            mlp_bias=True,
        )
    return dict(
        shared,
        layer_norm_eps=config.norm_eps,
        use_parallel_residual=False,
        hidden_dropout=config.dropout,
        rotary_pct=1.0 if config.position == "rope" else 0.0,
        rotary_emb_base=config.rope_base,
    )


def folded(config: TransformerConfig, model_class: str, tied: bool) -> tuple[str, ...]:
    """What the export computed ahead, in words, for the model card."""
    steps = [
        step
        for step, present in (
            (f"the embedding scale (x {config.token_scale:g})", config.token_scale != 1.0),
            ("adding segment row 0", config.type_vocab_size > 0),
            ("the d_e -> hidden projection", config.projected),
            ("the embedding norm", config.embedding_norm),
        )
        if present
    ]
    notes = (
        [f"input table: each token's vector after {', then '.join(steps)}, computed once per token"] if steps else []
    )
    if model_class == GPT2 and config.projected:
        notes.append("position table: the learned positions after the d_e -> hidden projection")
    if model_class == LLAMA:
        notes.append("MLP: tiedemb's up matrix as gate_proj, up_proj a constant 1 (weight zero, bias one)")
    notes.append(
        "output: tied to the input table"
        if tied
        else f"output: lm_head holds the {config.head} head multiplied out (tie_word_embeddings=false)"
    )
    return tuple(notes)
