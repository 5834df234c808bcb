"""Where training starts: a tiedemb checkpoint, BERT weights in transformers format, or nothing.

``load_pretrained`` reads a source into one neutral form (architecture fields and a state dict in
tiedemb's names); ``resolve_architecture`` takes the user's values where set, else the source's,
and refuses a set value that disagrees with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from tiedemb.errors import UserError
from tiedemb.nn.config import ARCHITECTURE, TransformerConfig
from tiedemb.training.checkpoints import read_checkpoint
from tiedemb.weights.bert import read_bert

#: The head settings BERT's masked-LM head fixes.
HEAD_SETTINGS = ("head", "output_bias", "head_bias", "head_activation", "head_norm")


@dataclass
class PretrainedWeights:
    """A pretrained source in neutral form."""

    origin: str  # as the user wrote it, for messages
    kind: str  # "checkpoint" or "BERT model", for messages
    fields: dict[str, Any]  # TransformerConfig field values, embedding_dim included
    state: dict[str, Tensor] = field(repr=False)  # embedding.*, encoder.* and maybe pooler.*
    data: dict[str, Any] = field(default_factory=dict)  # a checkpoint's data settings (its tokenizer ...)

    @property
    def has_head(self) -> bool:
        return any(key.startswith("head.") for key in self.state)

    def load_into(self, model: nn.Module, state: Mapping[str, Tensor], fresh: Callable[[str], bool]) -> None:
        """``model`` holding ``state``; every parameter it leaves out must be one ``fresh`` names."""
        result = model.load_state_dict(state, strict=False)
        missing = [key for key in result.missing_keys if not fresh(key)]
        if missing or result.unexpected_keys:
            raise UserError(
                f"pretrained {self.origin!r} does not fit the model: missing {missing[:3]}, "
                f"unexpected {result.unexpected_keys[:3]}"
            )


def load_pretrained(source: str, language_model: bool = False) -> PretrainedWeights:
    """Read ``source``: a ``.ckpt`` file, a transformers BERT directory, or a hub name
    (``language_model``: BERT only, with its masked-LM head when saved with one)."""
    path = Path(source).expanduser()
    if path.is_file() and language_model:
        raise UserError(
            f"model.pretrained {source!r} is a file; pretraining starts from BERT weights in transformers "
            "format (a folder with config.json, or a hub name). A tiedemb run is continued with "
            "--ckpt_path instead"
        )
    if path.is_file():
        return _load_checkpoint(source)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(
                f"pretrained directory {source!r} has no config.json; expected a transformers BERT model "
                "(config.json plus model.safetensors or pytorch_model.bin) or a tiedemb .ckpt file"
            )
        return PretrainedWeights(source, "BERT model", *read_bert(str(path), source, language_model))
    if source.endswith(".ckpt") or source.startswith((".", "/", "~")) or source.count("/") > 1:
        raise UserError(f"pretrained {source!r} does not exist (expected a .ckpt file or a BERT model directory)")
    return PretrainedWeights(source, "BERT model", *read_bert(source, source, language_model))


def _load_checkpoint(origin: str) -> PretrainedWeights:
    """A PretrainModule's or GlueModule's checkpoint, read as ``--ckpt_path`` reads one."""
    checkpoint = read_checkpoint(origin)
    if "hyper_parameters" not in checkpoint:
        raise UserError(f"pretrained {origin!r} is a checkpoint without hyper_parameters, not a tiedemb run's .ckpt")
    hparams = dict(checkpoint["hyper_parameters"])
    # attention direction is the classifier's choice, not the checkpoint's
    config = config_from_hparams({**hparams, "objective": "mlm"}, f"pretrained {origin!r}")
    fields = {name: getattr(config, name) for name in TransformerConfig.field_names_of(ARCHITECTURE)}
    state = {
        key.removeprefix("model."): value.float()
        for key, value in checkpoint["state_dict"].items()
        if key.removeprefix("model.").startswith(("embedding.", "encoder.", "pooler."))
    }
    if not any(key.startswith("encoder.") for key in state):
        raise UserError(f"pretrained {origin!r} holds no encoder weights (expected keys model.encoder.*)")
    return PretrainedWeights(
        origin, "checkpoint", fields, state, dict(checkpoint.get("datamodule_hyper_parameters") or {})
    )


def checkpoint_kind(checkpoint: Mapping[str, Any]) -> str | None:
    """ "glue" for a ``GlueModule``'s checkpoint, "pretrain" for a ``PretrainModule``'s, else ``None``."""
    class_path = str((checkpoint.get("hyper_parameters") or {}).get("_class_path", ""))
    state = checkpoint.get("state_dict") or {}
    if class_path.endswith("GlueModule") or "model.classifier.weight" in state:
        return "glue"
    if class_path.endswith("PretrainModule") or "model.head.decoder.weight" in state:
        return "pretrain"
    return None


def config_from_hparams(hparams: Mapping[str, Any], described: str) -> TransformerConfig:
    """The ``TransformerConfig`` a checkpoint's hyperparameters describe (unsaved fields at their defaults)."""
    known = {name: hparams[name] for name in TransformerConfig.field_names() if hparams.get(name) is not None}
    try:
        return TransformerConfig(**known)
    except (TypeError, UserError) as error:
        raise UserError(f"{described} does not describe a tiedemb model: {error}") from None


#: The architecture fields a pretrained source decides but ``embedding_dim``, which follows the hidden size.
ARCHITECTURE_FIELDS = tuple(name for name in TransformerConfig.field_names_of(ARCHITECTURE) if name != "embedding_dim")


def resolve_architecture(
    requested: Mapping[str, Any], source: PretrainedWeights | None, language_model: bool = False
) -> dict[str, Any]:
    """Concrete architecture values (and head settings, for a ``language_model``): the user's where
    set, else the source's, else the config's default; a set value that disagrees with the source's is
    refused. Fine-tuning may narrow ``embedding_dim`` (``fit_embedding`` settles it); pretraining
    continues at the pretrained width."""
    resolved: dict[str, Any] = {}
    for name in (*ARCHITECTURE_FIELDS, *(HEAD_SETTINGS if language_model else ())):
        given = requested.get(name)
        have = source.fields.get(name) if source is not None else None
        if given is None:
            default = TransformerConfig.__dataclass_fields__[name].default
            value = have if have is not None else (None if default is dataclasses.MISSING else default)
            if value is None:
                raise UserError(f"model.{name} must be set when model.pretrained is not")
            resolved[name] = value
            continue
        if have is not None and given != have:
            hint = (
                "use the tokenizer the model was pretrained with (data.tokenizer)"
                if name == "vocab_size"
                else f"leave model.{name} unset to take the pretrained value"
            )
            raise UserError(
                f"model.{name}={given!r} does not fit the pretrained {source.kind} {source.origin!r}, "
                f"whose {name} is {have!r}; {hint}"
            )
        resolved[name] = given
    given = requested.get("embedding_dim")
    width = source.fields["embedding_dim"] if source is not None else None
    if given is None:
        given = width if width is not None or language_model else resolved["hidden_size"]
    elif language_model and width is not None and given != width:
        raise UserError(
            f"model.embedding_dim={given!r} does not fit the pretrained {source.kind} {source.origin!r}, "
            f"whose embedding_dim is {width}; pretraining continues at the pretrained width (leave "
            "model.embedding_dim unset; GlueModule narrows it for fine-tuning)"
        )
    resolved["embedding_dim"] = given
    return resolved
