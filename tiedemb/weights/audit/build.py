"""The audited model: its config (a local config.json or a model_type, with ``--set`` overrides),
its size estimated before anything is built, and the model built with transformers' own random
initialisation. Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError, first_line
from tiedemb.weights.audit.families import Family, family_of

DEFAULT_MAX_PARAMETERS = 2_000_000_000
BYTES_PER_PARAMETER = 12
"""float32 weights, with room for the forward pass and one redrawn table (the σ remedy)."""


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict; a value is read as JSON (numbers, true/false, null) or kept as text."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = {"True": True, "False": False, "None": None}.get(text, text)
    return overrides


def read_config_file(source: Path) -> dict[str, Any]:
    path = source / "config.json" if source.is_dir() else source
    if not path.is_file():
        raise UserError(f"no config.json at {source}: give a config.json file or a folder holding one")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} is not a readable JSON config: {first_line(error)}") from None
    if not isinstance(values, dict) or "model_type" not in values:
        raise UserError(f"{path} names no model_type: it is not a transformers config")
    return values


def make_config(model_type: str | None, source: Path | None, overrides: dict[str, Any]) -> tuple[Any, Family]:
    """transformers' config for the model, with the overrides, and the model's family."""
    from transformers import AutoConfig

    values: dict[str, Any] = {}
    if source is not None:
        values = read_config_file(source)
        model_type = model_type or values.pop("model_type")
        values.pop("model_type", None)
        values.pop("architectures", None)  # the Auto class of the family decides the head
    try:
        default = AutoConfig.for_model(model_type)
    except ValueError:
        raise UserError(f"unknown model_type {model_type!r}: transformers has no config class of that name") from None
    family = family_of(model_type)
    for key in overrides:
        if not hasattr(default, key):
            raise UserError(f"--set {key}=...: the {model_type} config has no setting {key!r}")
    values = {**values, **overrides}
    if family.objective == "seq2seq" and "num_decoder_layers" not in values:
        # T5's decoder depth follows num_layers only when both are given at once.
        depth = values.get("num_layers", values.get("num_hidden_layers"))
        if depth is not None:
            values["num_decoder_layers"] = depth
    try:
        return AutoConfig.for_model(model_type, **values), family
    except Exception as error:  # transformers' own checks of the values (head counts, activations ...)
        raise UserError(
            f"transformers cannot build a {model_type} config from these settings: {message(error)}"
        ) from None


def message(error: BaseException) -> str:
    """The innermost error's first line: transformers wraps its checks in validation errors."""
    while error.__cause__ is not None:
        error = error.__cause__
    return first_line(error)


def estimate_parameters(config: Any) -> int:
    """About how many parameters the model has, from its sizes alone (an upper bound per layer)."""
    d = int(config.hidden_size)
    n = int(config.vocab_size)
    ffn = int(getattr(config, "intermediate_size", None) or getattr(config, "d_ff", None) or 4 * d)
    layers = int(config.num_hidden_layers) + int(getattr(config, "num_decoder_layers", None) or 0)
    per_layer = 8 * d * d + 3 * d * ffn  # attention (with cross-attention) and a gated feed-forward, bounded above
    tied = bool(getattr(config, "tie_word_embeddings", True))
    return n * d * (1 if tied else 2) + layers * per_layer


def available_memory() -> int | None:
    """Memory a new process can take: Linux's MemAvailable (page cache counts), else the free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_size(config: Any, max_parameters: int) -> int:
    """The estimate, or a ``UserError`` when the model is too large to build here."""
    estimate = estimate_parameters(config)
    memory = available_memory()
    limit = max_parameters
    reason = f"the limit of {max_parameters:.2g} (--max-params)"
    if memory is not None and memory // BYTES_PER_PARAMETER < limit:
        limit = memory // BYTES_PER_PARAMETER
        reason = f"what {memory / 2**30:.1f} GiB of free memory holds ({limit:.2g})"
    if estimate > limit:
        raise UserError(
            f"the {config.model_type} model at {config.num_hidden_layers} layers has about {estimate:.2g} parameters, "
            f"above {reason}: reduce the depth with --set num_hidden_layers=2 (or the width or vocabulary)"
        )
    return estimate


def build_model(config: Any, family: Family, seed: int) -> Any:
    """The model with transformers' random initialisation, float32, in eval mode (no dropout)."""
    import torch
    import transformers

    auto = getattr(transformers, family.auto_class)
    torch.manual_seed(seed)
    try:
        model = auto.from_config(config, dtype=torch.float32)
    except Exception as error:
        raise UserError(
            f"transformers cannot build a {config.model_type} model from this config: {message(error)}"
        ) from None
    if model.get_input_embeddings() is None or model.get_output_embeddings() is None:
        raise UserError(
            f"the {config.model_type} model has no input embedding or no language-model head: "
            "the audit needs both, over the same vocabulary"
        )
    return model.eval()
