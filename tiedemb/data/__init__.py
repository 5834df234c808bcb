"""LightningDataModules: pretraining text (or the embedded corpus) and GLUE.

The data modules (the class paths configs name) are loaded on first use, so the GLUE task table
(``tiedemb.data.glue_tasks``) can be read without the hub libraries.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GlueData": "tiedemb.data.glue",
    "PretrainData": "tiedemb.data.pretrain",
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
