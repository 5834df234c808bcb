"""The README.md of an export folder (huggingface_hub's ``ModelCard``), written from the checkpoint
alone. Local paths appear as their last part: where a run's files lay is true nowhere else."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The transformers pipeline and Auto class of each exported class.
USES = {
    "BertForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "BertForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "BertModel": ("feature-extraction", "AutoModel"),
    "GPTNeoXForCausalLM": ("text-generation", "AutoModelForCausalLM"),
}
#: Settings that say how a run was executed, not what it learned from.
RUNTIME_SETTINGS = {"num_proc", "num_workers", "pin_memory", "cache_dir", "encoding_errors", "compile", "peak_flops"}


def shown(value: Any) -> Any:
    """``value`` with every local path reduced to its last part (lists and mappings looked into)."""
    if isinstance(value, (list, tuple)):
        return [shown(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): shown(item) for key, item in value.items()}
    if isinstance(value, str) and (value.startswith(("/", "~", ".")) or Path(value).expanduser().exists()):
        return Path(value).name or value
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def recorded(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """A checkpoint's settings as the card shows them: no private keys, no runtime settings."""
    return {
        key: shown(value)
        for key, value in (settings or {}).items()
        if not key.startswith("_") and key not in RUNTIME_SETTINGS
    }


def recorded_metrics(checkpoint: Mapping[str, Any]) -> dict[str, float]:
    """Each checkpoint callback's monitored value, best and at this checkpoint."""
    metrics: dict[str, float] = {}
    for state in (checkpoint.get("callbacks") or {}).values():
        if isinstance(state, Mapping) and state.get("monitor"):
            for key, when in (("best_model_score", "best"), ("current_score", "at this checkpoint")):
                if state.get(key) is not None:
                    metrics[f"{state['monitor']} ({when})"] = round(float(state[key]), 6)
    return metrics


CARD = """---
{{ card_data }}
---

# {{ title }}

A `{{ model_class }}` trained with tiedemb: it loads without `trust_remote_code` and computes what \
the tiedemb model computed (to float rounding).

```python
from transformers import {{ auto }}{% if has_tokenizer %}, AutoTokenizer{% endif %}

model = {{ auto }}.from_pretrained({{ location }})
{% if has_tokenizer %}tokenizer = AutoTokenizer.from_pretrained({{ location }})
{% endif %}```
{% if not has_tokenizer %}
The folder holds no tokenizer: token ids are the ones the run was trained on.
{% endif %}
## Training

The model's and the data's settings as the checkpoint recorded them, the step it was saved at and
the scores it monitored:

```yaml
{{ training }}```

## License

Apache-2.0.
"""


def model_card(checkpoint: Mapping[str, Any], model_class: str, location: str, has_tokenizer: bool) -> str:
    """The folder's README.md: hub metadata, loading, the run's settings and metrics, the license."""
    import yaml
    from huggingface_hub import ModelCard, ModelCardData

    pipeline, auto = USES[model_class]
    training = {
        "model": recorded(checkpoint.get("hyper_parameters")),
        "data": recorded(checkpoint.get("datamodule_hyper_parameters")),
        "global_step": checkpoint.get("global_step"),
        "metrics": recorded_metrics(checkpoint),
    }
    metadata = ModelCardData(license="apache-2.0", library_name="transformers", pipeline_tag=pipeline, tags=["tiedemb"])
    card = ModelCard.from_template(
        metadata,
        template_str=CARD,
        title=Path(location).name or location,
        model_class=model_class,
        auto=auto,
        location=repr(location),
        has_tokenizer=has_tokenizer,
        training=yaml.safe_dump(training, sort_keys=False),
    )
    return str(card)
