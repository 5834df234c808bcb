"""The README.md of an export folder: what the model is, how it was trained, how to load it.

Written from the checkpoint alone (its model and data hyperparameters, the step it was saved at,
the metrics its checkpoint callbacks recorded), so a folder that reaches the hub says what it
holds without the run folder beside it. Local paths appear as their last part: where a run's
files lay on its machine is nobody's business and true nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiedemb.nn.config import HEAD_ONLY_SETTINGS, TransformerConfig
from tiedemb.weights.export_plan import BERT_MODEL, CLASSIFIER, MASKED_LM, ExportPlan

LICENSE = "apache-2.0"
#: The transformers pipeline and Auto class of each exported class; any other is a causal LM.
PIPELINES = {MASKED_LM: "fill-mask", CLASSIFIER: "text-classification", BERT_MODEL: "feature-extraction"}
AUTO_CLASSES = {
    MASKED_LM: "AutoModelForMaskedLM",
    CLASSIFIER: "AutoModelForSequenceClassification",
    BERT_MODEL: "AutoModel",
}
CAUSAL_PIPELINE, CAUSAL_AUTO_CLASS = "text-generation", "AutoModelForCausalLM"
#: Settings that say how a run was executed, not what it learned from.
RUNTIME_SETTINGS = {"num_proc", "num_workers", "pin_memory", "cache_dir", "encoding_errors", "compile", "peak_flops"}
OBJECTIVES = {"clm": "next-token (causal) language model", "mlm": "masked language model"}


def shown(value: Any) -> Any:
    """``value`` with every local path reduced to its last part (lists and mappings looked into)."""
    if isinstance(value, (list, tuple)):
        return [shown(item) for item in value]
    if isinstance(value, Mapping):
        return {key: shown(item) for key, item in value.items()}
    if isinstance(value, str) and (value.startswith(("/", "~", ".")) or Path(value).expanduser().exists()):
        return Path(value).name or value
    return value


def table(rows: Mapping[str, Any], heading: str) -> str:
    """A two-column Markdown table of the rows that have a value."""
    lines = [f"| {heading} | value |", "| --- | --- |"]
    lines += [f"| {name} | `{shown(value)}` |" for name, value in rows.items() if value is not None]
    return "\n".join(lines)


def number(value: Any) -> float | None:
    """A recorded metric as a plain number (checkpoints keep tensors), or ``None``."""
    try:
        result = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def recorded_metrics(checkpoint: Mapping[str, Any]) -> dict[str, str]:
    """The metrics the checkpoint keeps: each checkpoint callback's monitored value (best, and at this
    checkpoint), and a GLUE run's last dev score."""
    metrics: dict[str, str] = {}
    for state in (checkpoint.get("callbacks") or {}).values():
        if isinstance(state, Mapping) and state.get("monitor"):
            for key, when in (("best_model_score", "best"), ("current_score", "at this checkpoint")):
                if number(state.get(key)) is not None:
                    metrics[f"{state['monitor']} ({when})"] = f"{number(state[key]):.6g}"
    history = checkpoint.get("glue_history") or []
    if history and number(history[-1][1]) is not None:
        metrics["dev score, last evaluation (the task's main metric)"] = f"{number(history[-1][1]):.6g}"
    return metrics


def read_by_model(name: str, hparams: Mapping[str, Any]) -> bool:
    """Whether the model reads setting ``name`` (another head's settings and an unused rotary base are left out)."""
    if name in HEAD_ONLY_SETTINGS:
        return hparams.get("head") in HEAD_ONLY_SETTINGS[name]
    return name != "rope_base" or hparams.get("position") == "rope"


def run_settings(checkpoint: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The model's settings (those it reads, head and objective first), the training's (with the step
    the checkpoint was saved at) and the data's, as the checkpoint recorded them."""
    hparams = {
        key: value for key, value in (checkpoint.get("hyper_parameters") or {}).items() if not key.startswith("_")
    }
    fields = set(TransformerConfig.field_names())
    model = {"head": hparams.get("head"), "objective": hparams.get("objective")}
    model.update((key, value) for key, value in hparams.items() if key in fields and read_by_model(key, hparams))
    training = {key: value for key, value in hparams.items() if key not in fields and key not in RUNTIME_SETTINGS}
    training.update(global_step=checkpoint.get("global_step"), epoch=checkpoint.get("epoch"))
    data = {
        key: value
        for key, value in (checkpoint.get("datamodule_hyper_parameters") or {}).items()
        if not key.startswith("_") and key not in RUNTIME_SETTINGS
    }
    if data.get("objective") == "clm":
        data.pop("mlm_probability", None)  # read by masked-LM batches only
    return model, training, data


CARD = """---
{{ card_data }}
---

# {{ title }}

A {{ kind }} trained with tiedemb and exported as transformers' `{{ model_class }}`: it loads without \
`trust_remote_code` and computes what the tiedemb model computed (to float rounding).

## Loading

```python
from transformers import {{ auto }}{% if has_tokenizer %}, AutoTokenizer{% endif %}

model = {{ auto }}.from_pretrained({{ location }})
{% if has_tokenizer %}tokenizer = AutoTokenizer.from_pretrained({{ location }})
{% endif %}```
{% if not has_tokenizer %}
The folder holds no tokenizer: token ids are the ones the run was trained on.
{% endif %}
## Model

{{ model }}
{% if folded %}
How the weights map:

{% for note in folded %}- {{ note }}
{% endfor %}{% endif %}
## Training

{{ training }}

## Data

{{ data }}

## Metrics

{{ metrics }}

## License

Apache-2.0.
"""
"""The card's text (``huggingface_hub``'s Jinja template; ``card_data`` is the hub's metadata)."""


def model_card(checkpoint: Mapping[str, Any], plan: ExportPlan, location: str, has_tokenizer: bool) -> str:
    """The folder's README.md: hub metadata, loading, the run's settings and metrics, the license."""
    from huggingface_hub import ModelCard, ModelCardData

    model, training, data = run_settings(checkpoint)
    metrics = recorded_metrics(checkpoint)
    kind = OBJECTIVES.get(str(model.get("objective") or "mlm"), "model")
    if plan.model_class == CLASSIFIER:
        kind = f"{str(training.get('task') or 'sequence').upper()} classifier"
    pipeline = PIPELINES.get(plan.model_class, CAUSAL_PIPELINE)
    metadata = ModelCardData(license=LICENSE, library_name="transformers", pipeline_tag=pipeline, tags=["tiedemb"])
    card = ModelCard.from_template(
        metadata,
        template_str=CARD,
        title=Path(location).name or location,
        kind=kind,
        model_class=plan.model_class,
        auto=AUTO_CLASSES.get(plan.model_class, CAUSAL_AUTO_CLASS),
        location=repr(location),
        has_tokenizer=has_tokenizer,
        model=table(model, "setting"),
        folded=plan.folded,
        training=table(training, "setting"),
        data=table(data, "setting") if data else "The checkpoint records no data settings.",
        metrics=table(metrics, "metric") if metrics else "The checkpoint records no metrics.",
    )
    return str(card)
