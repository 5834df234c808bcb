"""Plain PyTorch building blocks: no Lightning, no data, no files.

Names are exported lazily, so ``tiedemb.nn.config`` can be imported without loading torch.
"""

from __future__ import annotations

from tiedemb.lazy import lazy_exports

_EXPORTS = {
    "HEADS": "tiedemb.nn.heads",
    "IGNORE_INDEX": "tiedemb.nn.layers",
    "LMOutput": "tiedemb.nn.model",
    "Transformer": "tiedemb.nn.model",
    "TransformerConfig": "tiedemb.nn.config",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
