"""Where pretraining starts: BERT weights in transformers format, with BERT's masked-LM head or a fresh head.

``PretrainModule``'s ``model.pretrained``. A model saved with its masked-LM head
(``BertForMaskedLM``) gives the embedding, the encoder and the head, which is tiedemb's
``tied_orth`` head with a bias, the encoder's activation, a norm and an output bias, its decoder
the token table (``tiedemb.weights.bert``); a ``BertModel`` gives the embedding and encoder, and the
head configured is drawn afresh. ``resolve_settings`` fills the settings the user left unset from
the source, and ``check_trainable`` refuses settings that would compute something else than the
pretrained model (the same checks ``python -m tiedemb.export`` makes on the way out).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.nn.config import TransformerConfig
from tiedemb.options import changed_from_default, no_effect
from tiedemb.weights.export_plan import encoder_problem, masked_lm_head_problem
from tiedemb.weights.source import (
    ARCHITECTURE_FIELDS,
    PretrainedWeights,
    config_defaults,
    load_pretrained,
    resolve_fields,
)

#: The head settings BERT's masked-LM head fixes; unset, they are the pretrained head's (or the
#: config's defaults when the source has no head).
HEAD_SETTINGS = ("head", "output_bias", "head_bias", "head_activation", "head_norm")
TIED_DECODER = "head.decoder.weight"
"""The tied head's matrix: the token table itself, so never among the source's weights."""


def load_language_model(source: str) -> PretrainedWeights:
    """The BERT model at ``source`` (a folder or a hub name), with its masked-LM head when it was saved with one."""
    if Path(source).expanduser().is_file():
        raise UserError(
            f"model.pretrained {source!r} is a file; pretraining starts from BERT weights in transformers "
            "format (a folder with config.json, or a hub name). A tiedemb run is continued with "
            "--ckpt_path instead"
        )
    return load_pretrained(source, with_head=True)


def has_head(source: PretrainedWeights) -> bool:
    return any(key.startswith("head.") for key in source.state)


def resolve_settings(requested: Mapping[str, Any], source: PretrainedWeights | None) -> dict[str, Any]:
    """Concrete architecture and head values: the user's where set, else the source's, else the defaults.

    Without a source an unset ``embedding_dim`` stays unset (the hidden size, as the config has it);
    with one it must be the pretrained width, which the tied head and the tables are.
    """
    resolved = resolve_fields(requested, source, config_defaults((*ARCHITECTURE_FIELDS, *HEAD_SETTINGS)))
    given = requested.get("embedding_dim")
    if source is None:
        resolved["embedding_dim"] = given
        return resolved
    width = source.fields["embedding_dim"]
    if given is not None and given != width:
        raise UserError(
            f"model.embedding_dim={given!r} does not fit the pretrained {source.kind} {source.origin!r}, "
            f"whose embedding_dim is {width}; pretraining continues at the pretrained width (leave "
            "model.embedding_dim unset; GlueModule narrows it for fine-tuning)"
        )
    resolved["embedding_dim"] = width
    return resolved


def refuse_unread_with_source(settings: Mapping[str, Any], source: PretrainedWeights) -> None:
    """Refuse initialisation settings that the pretrained weights replace before anything reads them.

    The token table always comes from the source, so its std and ``tied_scaled_init``'s scaled
    draw of it change nothing; ``init_std`` draws only a fresh untied output matrix (BERT's head
    and the tied heads take or copy every weight they have).
    """
    origin = f"with model.pretrained={source.origin!r}"
    if settings.get("embedding_init_std") is not None:
        raise no_effect(
            "model.embedding_init_std",
            settings["embedding_init_std"],
            f"{origin}: the token table is the pretrained one",
        )
    if settings.get("head") == "tied_scaled_init":
        raise no_effect(
            "model.head",
            "tied_scaled_init",
            f"{origin}: its scaled draw of the shared table is replaced by the pretrained table; use model.head=tied",
        )
    default_std = TransformerConfig.__dataclass_fields__["init_std"].default
    if changed_from_default(settings.get("init_std"), default_std) and (
        has_head(source) or settings.get("head") != "untied"
    ):
        raise no_effect(
            "model.init_std",
            settings["init_std"],
            f"{origin}: every weight it would draw comes from the "
            "pretrained model (only a fresh untied head draws from it)",
        )


def check_trainable(config: TransformerConfig, source: PretrainedWeights) -> None:
    """Refuse settings under which the model would not compute what the pretrained BERT computes."""
    problem = encoder_problem(config)
    if problem is None and has_head(source):
        problem = masked_lm_head_problem(config)
    if problem is not None:
        raise UserError(f"the pretrained {source.kind} {source.origin!r} cannot be trained with {problem}")


def source_state(source: PretrainedWeights) -> dict[str, Any]:
    """The source's weights named as ``Transformer`` names its parameters (no pooler: it has none)."""
    return {key: value for key, value in source.state.items() if not key.startswith("pooler.")}


def unexpectedly_missing(missing: list[str], source: PretrainedWeights) -> list[str]:
    """The parameters a load from ``source`` should have filled but did not: every one but the tied
    decoder, and, for a source without a head, the head drawn afresh."""
    fresh_head = not has_head(source)
    return [key for key in missing if key != TIED_DECODER and not (fresh_head and key.startswith("head."))]
