"""BERT weights in transformers' layout -> tiedemb's parameter names, and what BERT's layout cannot hold.

tiedemb's post-norm encoder with learned positions and segments is BERT's architecture; only the
names differ, and tiedemb fuses the query, key and value projections into one ``qkv`` matrix.
BERT's masked-LM head is tiedemb's ``tied_orth`` head with a bias, the encoder's activation, a
norm and an output bias.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tiedemb.errors import UserError, first_line
from tiedemb.nn.config import TransformerConfig

#: transformers' ``hidden_act`` names -> tiedemb activations with the same function ("gelu" is the
#: exact GELU in both; the tanh approximations are refused, not swapped).
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu"}
#: tiedemb's activations that transformers' ``hidden_act`` names alike.
HIDDEN_ACTS = tuple(dict.fromkeys(ours for theirs, ours in ACTIVATIONS.items() if theirs == ours))

#: Per-layer modules: transformers name (under ``encoder.layer.<i>.``) -> tiedemb name
#: (under ``encoder.blocks.<i>.``); q, k, v are handled apart because they are fused.
LAYER_NAMES = {
    "attention.output.dense": "attention.out",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
#: The embedding and the pooler: the same modules in both layouts.
OUTER_NAMES = {
    "embeddings.word_embeddings": "embedding.token",
    "embeddings.position_embeddings": "embedding.position",
    "embeddings.token_type_embeddings": "embedding.segment",
    "embeddings.LayerNorm": "embedding.norm",
    "pooler.dense": "pooler",
}
#: BERT's masked-LM transform -> tiedemb's ``tied_orth`` head; the decoder is the word table in both.
MLM_HEAD_NAMES = {
    "cls.predictions.transform.dense": "head.projection",
    "cls.predictions.transform.LayerNorm": "head.norm",
}
#: transformers classes whose saved weights hold BERT's masked-LM head.
MLM_ARCHITECTURES = ("BertForMaskedLM", "BertForPreTraining")
QKV = ("query", "key", "value")
LEAVES = ("weight", "bias")


def masked_lm_head_fields(activation: str) -> dict[str, Any]:
    """The ``TransformerConfig`` values of BERT's masked-LM head, for an encoder using ``activation``."""
    return {
        "objective": "mlm",
        "head": "tied_orth",
        "head_bias": True,
        "head_activation": activation,
        "head_norm": True,
        "output_bias": True,
    }


def encoder_problem(config: TransformerConfig) -> str | None:
    """The first setting under which a pretrained BERT's embedding and encoder would compute something
    else, or ``None``; the architecture settings are the BERT's own (``resolve_architecture``)."""
    if config.causal:
        return "model.objective='clm': the model attends causally, BERT's encoder attends both ways"
    if config.token_scale != 1.0:
        return f"model.embedding_scale={config.embedding_scale!r}: BERT adds the token vectors unscaled"
    return None


def masked_lm_head_problem(config: TransformerConfig) -> str | None:
    """The setting that makes BERT's masked-LM head compute something else, or ``None``; its other
    settings are the BERT's own (``resolve_architecture``)."""
    if config.readout_scale != 1.0:
        return f"model.output_scale={config.output_scale!r} (BERT's logits are unscaled)"
    return None


def leaf_names(modules: Mapping[str, str]) -> dict[str, str]:
    """Each module's weight and bias: one layout's key -> the other's."""
    return {f"{theirs}.{leaf}": f"{ours}.{leaf}" for theirs, ours in modules.items() for leaf in LEAVES}


def layer_names(num_layers: int, modules: Mapping[str, str], source: str, target: str) -> dict[str, str]:
    """``modules`` of every layer, the one under ``source.<i>.``, the other under ``target.<i>.``."""
    return {f"{source}.{i}.{old}": f"{target}.{i}.{new}" for i in range(num_layers) for old, new in modules.items()}


def bert_names(num_layers: int, with_head: bool = False) -> dict[str, str]:
    """BERT key -> tiedemb key of every weight and bias (the pooler's, and BERT's masked-LM head's
    ``with_head``) but the attention input projections, which the two layouts split differently."""
    layers = layer_names(num_layers, LAYER_NAMES, "encoder.layer", "encoder.blocks")
    modules = {**OUTER_NAMES, **(MLM_HEAD_NAMES if with_head else {}), **layers}
    return {**leaf_names(modules), **({"cls.predictions.bias": "head.bias"} if with_head else {})}


def renamed(state: Mapping[str, Tensor], names: Mapping[str, str]) -> dict[str, Tensor]:
    """The tensors of ``names`` (old key -> new key) that ``state`` holds, in float32, under their new keys."""
    return {new: state[old].float() for old, new in names.items() if old in state}


def fields_from_bert_config(config: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """``TransformerConfig`` field values for a BERT config (``config.json`` as a mapping)."""
    # What tiedemb's encoder computes, each a key's first value its transformers default: others are refused.
    readable = {"model_type": ("bert",), "position_embedding_type": ("absolute",), "hidden_act": (*ACTIVATIONS,)}
    for key, values in readable.items():
        if config.get(key, values[0]) not in values:
            raise UserError(
                f"pretrained model {origin!r} has {key}={config[key]!r}; tiedemb reads BERT models with "
                f"{key} {' or '.join(map(repr, values))}"
            )
    activation = config.get("hidden_act", "gelu")
    return {
        "vocab_size": int(config["vocab_size"]),
        "hidden_size": int(config["hidden_size"]),
        "num_layers": int(config["num_hidden_layers"]),
        "num_heads": int(config["num_attention_heads"]),
        "intermediate_size": int(config["intermediate_size"]),
        "embedding_dim": int(config["hidden_size"]),
        "embedding_projection": "auto",  # no projection at full width
        "embedding_norm": True,
        "max_position_embeddings": int(config["max_position_embeddings"]),
        "position": "learned",
        "type_vocab_size": int(config.get("type_vocab_size", 2)),
        "norm": "layernorm",
        "norm_position": "post",
        "norm_eps": float(config.get("layer_norm_eps", 1e-12)),
        "activation": ACTIVATIONS[activation],
        "residual_init": "standard",
    }


def bert_to_tiedemb(state: Mapping[str, Tensor], num_layers: int, with_head: bool = False) -> dict[str, Tensor]:
    """A BERT state dict (a leading ``bert.`` dropped) in tiedemb's names, q, k and v fused into
    ``qkv``; ``with_head``: BERT's masked-LM head as ``head.*`` too, without the tied decoder."""
    state = {key.removeprefix("bert."): value for key, value in state.items()}
    out = renamed(state, bert_names(num_layers, with_head))
    for layer, leaf in itertools.product(range(num_layers), LEAVES):
        parts = [state[f"encoder.layer.{layer}.attention.self.{part}.{leaf}"].float() for part in QKV]
        out[f"encoder.blocks.{layer}.attention.qkv.{leaf}"] = torch.cat(parts, dim=0)
    return out


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off for one load or save (a bar per call is noise in a log)."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()


def read_bert(name_or_path: str, origin: str, with_head: bool = False) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``TransformerConfig`` field values and tiedemb-named float weights of a BERT model, read through
    transformers; ``with_head``: a model saved with BERT's masked-LM head gives that head too."""
    from transformers import AutoConfig, BertForMaskedLM, BertModel

    from tiedemb.training.hub import hub_access

    local = Path(name_or_path).is_dir()
    online = True
    try:
        with no_progress_bars(), contextlib.nullcontext(True) if local else hub_access() as online:
            config = AutoConfig.from_pretrained(name_or_path)
            fields = fields_from_bert_config(config.to_dict(), origin)  # others refused before any weights
            # Decided from the saved class, not by trying: transformers fills an absent head randomly.
            head = with_head and any(name in MLM_ARCHITECTURES for name in config.architectures or ())
            model_class = BertForMaskedLM if head else BertModel
            model, info = model_class.from_pretrained(name_or_path, output_loading_info=True)
    except UserError:
        raise
    except (OSError, ValueError) as error:
        where = "" if local or online else " (the hub is unreachable and it is not in the local cache)"
        raise UserError(f"could not load pretrained BERT model {origin!r}{where}: {first_line(error)}") from None
    state = model.state_dict()
    # transformers fills absent weights randomly: a random pooler is left out, and any other absent
    # weight must not pass for a pretrained one.
    missing = sorted(info.get("missing_keys", ()))
    absent = [key for key in missing if not key.startswith("pooler.")]
    if absent:
        raise UserError(
            f"pretrained BERT model {origin!r} lacks {absent[0]!r}; it is not a complete {model_class.__name__}"
        )
    if missing:
        state = {key: value for key, value in state.items() if not key.startswith("pooler.")}
    if head:
        fields.update(masked_lm_head_fields(fields["activation"]))
    return fields, bert_to_tiedemb(state, fields["num_layers"], with_head=head)
