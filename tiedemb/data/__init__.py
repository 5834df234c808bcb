"""LightningDataModules: pretraining text (or the embedded corpus) and GLUE, each loaded on first use."""

from __future__ import annotations

from tiedemb.lazy import lazy_exports

_EXPORTS = {
    "GlueData": "tiedemb.data.glue",
    "PretrainData": "tiedemb.data.pretrain",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
