"""The pretraining text options' defaults, known before any text is read.

Kept apart from ``text`` and ``text_files`` so that the data module's signature and first checks
need neither ``datasets`` nor ``pyarrow``: a run on the embedded corpus never imports them.
"""

from __future__ import annotations

TEXT_COLUMN = "text"
"""The field of JSON lines, parquet files and hub datasets that holds the text, unless told otherwise."""
VAL_FRACTION = 0.05
"""Documents held out for validation when the source gives no validation text."""
