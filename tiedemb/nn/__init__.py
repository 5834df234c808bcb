"""Plain PyTorch building blocks: no Lightning, no data, no files.

Names are exported lazily, so ``tiedemb.nn.config`` (and ``tiedemb.theory``, which reads its
names) can be imported without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "HEADS": "tiedemb.nn.heads",
    "IGNORE_INDEX": "tiedemb.nn.loss",
    "LMOutput": "tiedemb.nn.model",
    "Transformer": "tiedemb.nn.model",
    "TransformerConfig": "tiedemb.nn.config",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
