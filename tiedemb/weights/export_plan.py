"""A tiedemb checkpoint's settings and weights in a transformers layout, or why they do not fit.

``plan_export`` maps hyperparameters and a state dict to a transformers config and a state dict in
its names, or one ``UserError`` naming the setting the layout cannot hold. Masked-LM and GLUE
models go to BERT's classes, next-token models to GPT-NeoX. Why the mappings are exact:

* BERT: tiedemb's embedding norm(P (token + position + segment)) with a bias-free P equals
  norm(token P^T + position P^T + segment P^T), so each table times P^T is BERT's table; a model
  without segments gets two zero rows; ``tied_orth`` with a bias, the encoder's activation and a
  norm at full width is BERT's masked-LM transform, its decoder the word table.
* GPT-NeoX (pre-norm, sequential residuals, every head dimension rotated): tiedemb rotates in the
  rotate-half form as GPT-NeoX does, so only the fused qkv rows are regrouped head by head. With
  rotary or no positions the embedding is a function of the token alone, which is the exported
  input table; every linear head gives logits D F h, with F read off by applying tiedemb's head
  to the identity, so D F is the output matrix (tied where it equals the input table).
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
from tiedemb.weights.bert import (
    HIDDEN_ACTS,
    LEAVES,
    layer_names,
    leaf_names,
    renamed,
    shared_config,
    tiedemb_to_bert,
)
from tiedemb.weights.narrow import PROJECTION, TABLES
from tiedemb.weights.source import config_from_hparams

NEOX = "GPTNeoXForCausalLM"
OUTPUT_WEIGHT = "lm_head.weight"
BERT_MODEL = "BertModel"
MASKED_LM = "BertForMaskedLM"
CLASSIFIER = "BertForSequenceClassification"

#: Segment rows written for a model without segments: token types 0 and 1 both add nothing.
ZERO_SEGMENT_ROWS = 2


@dataclass
class ExportPlan:
    """What to build and save: a transformers class, its config's keywords, its state dict."""

    model_class: str
    config: dict[str, Any]
    state: dict[str, Tensor] = field(repr=False)

    @property
    def causal(self) -> bool:
        return self.model_class == NEOX

    @property
    def config_class(self) -> str:
        return "GPTNeoXConfig" if self.causal else "BertConfig"


def encoder_problem(config: TransformerConfig) -> str | None:
    """The first setting BERT's embedding and encoder cannot reproduce exactly, or ``None``."""
    if config.causal:
        return "model.objective='clm': the model attends causally, BERT's encoder attends both ways"
    if config.position != "learned":
        return f"model.position={config.position!r}: BERT has learned absolute positions only"
    if config.norm_position != "post":
        return f"model.norm_position={config.norm_position!r}: BERT normalises after each residual sum (post)"
    if config.norm != "layernorm":
        return f"model.norm={config.norm!r}: BERT's norms are LayerNorm"
    if config.activation not in HIDDEN_ACTS:
        return f"model.activation={config.activation!r} is none of BERT's activations ({', '.join(HIDDEN_ACTS)})"
    if config.residual_init == "deepnorm":
        return "model.residual_init='deepnorm': DeepNorm up-weights the residual stream, BERT does not"
    if not config.embedding_norm:
        return "model.embedding_norm=false: BERT normalises the embedding sum"
    if config.token_scale != 1.0:
        return f"model.embedding_scale={config.embedding_scale!r}: BERT adds the token vectors unscaled"
    return None


def masked_lm_head_problem(config: TransformerConfig) -> str | None:
    """The first setting that makes the output head other than BERT's masked-LM head, or ``None``."""
    checks = (
        (config.objective == "mlm", f"model.objective={config.objective!r} (BERT's head predicts masked tokens)"),
        (config.head == "tied_orth", f"model.head={config.head!r} (BERT's head is tied_orth with its transform)"),
        (config.head_bias, "model.head_bias=false (BERT's transform has a bias)"),
        (
            config.head_activation == config.activation,
            f"model.head_activation={config.head_activation!r} (BERT's transform uses the encoder's activation, "
            f"{config.activation!r})",
        ),
        (config.head_norm, "model.head_norm=false (BERT's transform ends in a LayerNorm)"),
        (config.output_bias, "model.output_bias=false (BERT's decoder has a bias)"),
        (
            not config.projected,
            f"model.embedding_dim={config.embedding_dim} with an embedding projection "
            f"(BERT's tied decoder is hidden={config.hidden_size} wide)",
        ),
        (config.readout_scale == 1.0, f"model.output_scale={config.output_scale!r} (BERT's logits are unscaled)"),
    )
    return next((problem for fits, problem in checks if not fits), None)


def full_width_embedding(inner: Mapping[str, Tensor], config: TransformerConfig) -> dict[str, Tensor]:
    """``embedding.*`` with every table hidden wide (times the projection; zero segment rows if none)."""
    tables = {key: inner[key].float() for key in TABLES if key in inner}
    if PROJECTION in inner:  # (hidden, d_e); in float64 so that the product adds no rounding of its own
        weight = inner[PROJECTION].double()
        tables = {key: (table.double() @ weight.T).float() for key, table in tables.items()}
    tables.setdefault("embedding.segment.weight", torch.zeros(ZERO_SEGMENT_ROWS, config.hidden_size))
    return {**tables, **{key: inner[key].float() for key in ("embedding.norm.weight", "embedding.norm.bias")}}


def bert_state(inner: Mapping[str, Tensor], config: TransformerConfig, model_class: str) -> dict[str, Tensor]:
    """A tiedemb model's weights named for ``model_class``."""
    head = model_class == MASKED_LM
    encoder = tiedemb_to_bert({**inner, **full_width_embedding(inner, config)}, config.num_layers, with_head=head)
    if model_class == BERT_MODEL:
        return encoder
    # BERT's task models hold the encoder under ``bert.``, their head beside it
    out = {key if key.startswith("cls.") else f"bert.{key}": value for key, value in encoder.items()}
    if model_class == CLASSIFIER:
        out.update({f"classifier.{leaf}": inner[f"classifier.{leaf}"].float() for leaf in ("weight", "bias")})
    return out


def bert_config(
    config: TransformerConfig, hparams: Mapping[str, Any], labels: tuple[str, ...] | None
) -> dict[str, Any]:
    """``BertConfig`` keywords for the model; ``labels`` (class names in id order) for a classifier."""
    values = dict(
        shared_config(config),
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        type_vocab_size=config.type_vocab_size or ZERO_SEGMENT_ROWS,
        position_embedding_type="absolute",
    )
    if labels is not None:
        values.update(
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: index for index, label in enumerate(labels)},
            problem_type="single_label_classification",
            classifier_dropout=hparams.get("classifier_dropout"),
        )
    return values


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


def plan_export(
    hparams: Mapping[str, Any], state: Mapping[str, Tensor], kind: str, labels: tuple[str, ...] | None, origin: str
) -> ExportPlan:
    """Everything ``python -m tiedemb.export`` writes but the tokenizer and the model card, or a ``UserError``.

    ``kind``: "glue" or "pretrain"; a next-token pretraining model goes to GPT-NeoX, a GLUE model to
    BERT's classifier (its encoder alone without a pooler), a masked-LM model to ``BertForMaskedLM``
    when its head is BERT's, else to ``BertModel``. ``labels``: a classifier's class names in id order.
    """
    config = config_from_hparams({**hparams, "objective": hparams.get("objective") or "mlm"}, f"checkpoint {origin!r}")
    inner = {key.removeprefix("model."): value for key, value in state.items()}
    if kind == "pretrain" and config.causal:
        problem = causal_problem(config)
        if problem is not None:
            raise UserError(
                f"checkpoint {origin!r} cannot be exported to a causal LM: {problem}; "
                f"transformers' {NEOX} does not hold it exactly"
            )
        weights, tied = causal_state(inner, config)
        return ExportPlan(NEOX, causal_config(config, tied), weights)
    problem = encoder_problem(config)
    if problem is not None:
        raise UserError(
            f"checkpoint {origin!r} cannot be exported to BERT: {problem}; "
            "no transformers BERT class holds it (each has BERT's encoder)"
        )
    if kind == "glue":
        model_class = CLASSIFIER if hparams.get("pooler", True) else BERT_MODEL
    else:
        model_class = BERT_MODEL if masked_lm_head_problem(config) else MASKED_LM
    if model_class == CLASSIFIER and labels is None:
        labels = tuple(f"LABEL_{index}" for index in range(int(hparams["num_labels"])))
    return ExportPlan(
        model_class,
        bert_config(config, hparams, labels if model_class == CLASSIFIER else None),
        bert_state(inner, config, model_class),
    )
