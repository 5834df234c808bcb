"""LightningDataModules: pretraining text (or the embedded corpus) and GLUE.

The data modules (the class paths configs name) are loaded on first use, so the GLUE task table
(``tiedemb.data.glue_tasks``) can be read without the hub libraries.
"""

from __future__ import annotations

from tiedemb.lazy import lazy_exports

_EXPORTS = {
    "GlueData": "tiedemb.data.glue",
    "PretrainData": "tiedemb.data.pretrain",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
