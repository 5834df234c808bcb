"""tiedemb: tied input/output embeddings and embedding width in Transformer encoders.

``tiedemb.PretrainModule`` and ``tiedemb.GlueModule`` (the class paths configs name) are loaded
on first use, so ``import tiedemb.nn`` or ``import tiedemb.theory`` does not pull in Lightning,
datasets or transformers.
"""

from __future__ import annotations

from tiedemb.lazy import lazy_exports

__version__ = "0.2.0"

_EXPORTS = {
    "GlueModule": "tiedemb.modules.glue",
    "PretrainModule": "tiedemb.modules.pretrain",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
