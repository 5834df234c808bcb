"""What the audit knows of each transformers architecture: where its stream starts and ends, and
what it does at the embedding and at the output.

One ``Family`` per kind of model; ``FAMILIES`` maps each ``model_type`` the audit handles to its
family. Everything here is a fact of transformers' model code that the config does not state (the
config states the sizes, the init std, the soft-cap): Gemma multiplies the token vectors by √d,
T5 multiplies what meets the tied table by d^-½ (unless its config asks it not to), BERT's
masked-LM head passes the hidden state through dense → GELU → LayerNorm before the tied table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    """How one kind of transformers model is read.

    ``layers``: the dotted path of the block list; the first block's input is the stream the
    embedding starts (token vectors, input scale, added positions). ``final_norm``: the final norm
    of a pre-norm model, whose input is where the stream ends. ``stream_end``: for a post-norm
    model without a final norm, the module whose output is the end of the stream.
    """

    label: str
    auto_class: str  # the transformers Auto class that builds the model with its language-model head
    objective: str  # "clm" (next token), "mlm" (masked token) or "seq2seq" (the decoder's next token)
    layers: str
    final_norm: str | None = None
    stream_end: str | None = None
    input_scale: str = "none"  # "sqrt_d": Gemma's token vectors times sqrt(hidden)
    output_scale: str = "none"  # "t5": d^-1/2 on what meets the tied table when scale_decoder_outputs
    positions: bool = False  # a learned position table added to the token vectors
    segments: bool = False  # a segment (token type) table added too
    head_transform: bool = False  # dense -> activation -> LayerNorm before the tied table (BERT's MLM head)
    table_std: str = "initializer_range"  # or "initializer_factor" (T5 draws its shared table with std 1.0 x factor)
    norm_gain_from_factor: bool = False  # T5 draws every norm's weight as initializer_factor, not 1

    def input_multiplier(self, config: Any) -> float:
        return math.sqrt(config.hidden_size) if self.input_scale == "sqrt_d" else 1.0

    def output_multiplier(self, config: Any) -> float:
        # T5 and UMT5 scale unless a T5 v1.1 config says tie_word_embeddings=false (scale_decoder_outputs);
        # mT5's model never scales (its config has no such setting).
        if self.output_scale == "t5" and getattr(config, "scale_decoder_outputs", False):
            return config.d_model**-0.5
        return 1.0

    def norm_gain(self, config: Any) -> float:
        """The final norm's weight at initialisation (T5 draws every norm's weight as initializer_factor)."""
        return float(config.initializer_factor) if self.norm_gain_from_factor else 1.0

    def token_std(self, config: Any) -> float:
        if self.table_std == "initializer_factor":
            return float(config.initializer_factor)
        return float(config.initializer_range)


LLAMA_LIKE = Family("Llama-like decoder", "AutoModelForCausalLM", "clm", "model.layers", final_norm="model.norm")
GEMMA = Family(
    "Gemma decoder (input scale √d)",
    "AutoModelForCausalLM",
    "clm",
    "model.layers",
    final_norm="model.norm",
    input_scale="sqrt_d",
)
GPT2 = Family(
    "GPT-2 decoder (learned positions)",
    "AutoModelForCausalLM",
    "clm",
    "transformer.h",
    final_norm="transformer.ln_f",
    positions=True,
)
GPT_NEOX = Family(
    "GPT-NeoX decoder", "AutoModelForCausalLM", "clm", "gpt_neox.layers", final_norm="gpt_neox.final_layer_norm"
)


def _masked_lm(prefix: str, layers: str, label: str) -> Family:
    return Family(
        label,
        "AutoModelForMaskedLM",
        "mlm",
        f"{prefix}.encoder.{layers}",
        stream_end=f"{prefix}.encoder",
        positions=True,
        segments=True,
        head_transform=True,
    )


T5_LIKE = Family(
    "T5 encoder-decoder",
    "AutoModelForSeq2SeqLM",
    "seq2seq",
    "decoder.block",
    final_norm="decoder.final_layer_norm",
    output_scale="t5",
    table_std="initializer_factor",
    norm_gain_from_factor=True,
)

FAMILIES: dict[str, Family] = {
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "olmo2", "smollm3", "phi3"), LLAMA_LIKE),
    **dict.fromkeys(("gemma", "gemma2", "gemma3_text"), GEMMA),
    "gpt2": GPT2,
    "gpt_neox": GPT_NEOX,
    "bert": _masked_lm("bert", "layer", "BERT encoder (masked LM)"),
    "roberta": _masked_lm("roberta", "layer", "RoBERTa encoder (masked LM)"),
    "albert": _masked_lm("albert", "albert_layer_groups", "ALBERT encoder (masked LM, factorised embedding)"),
    **dict.fromkeys(("t5", "mt5", "umt5"), T5_LIKE),
}
"""``model_type`` -> its family: the architectures the audit reads."""


def family_of(model_type: str) -> Family:
    """The family of a model_type; a ``UserError`` saying what the audit needs otherwise."""
    from transformers.models.auto import modeling_auto

    from tiedemb.errors import UserError

    if model_type in FAMILIES:
        return FAMILIES[model_type]
    heads = (
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )
    if not any(model_type in names for names in heads):
        raise UserError(
            f"model_type {model_type!r} has no language-model head: the audit needs an input embedding and a "
            "language-model head over the same vocabulary (a causal LM, a masked LM or a T5-style encoder-decoder)"
        )
    raise UserError(
        f"model_type {model_type!r} is a language model the audit does not read yet; it reads: {', '.join(FAMILIES)}"
    )
