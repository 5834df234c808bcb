"""tiedemb: tied input/output embeddings and embedding width in Transformer encoders.

``tiedemb.PretrainModule`` and ``tiedemb.GlueModule`` (the class paths configs name) are loaded
on first use, so ``import tiedemb.nn`` or ``import tiedemb.theory`` does not pull in Lightning,
datasets or transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GlueModule": "tiedemb.modules.glue",
    "PretrainModule": "tiedemb.modules.pretrain",
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
