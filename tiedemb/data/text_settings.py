"""The pretraining text options' defaults, apart from ``text`` so that a run on the embedded corpus
never imports ``datasets`` or ``pyarrow``."""

from __future__ import annotations

TEXT_COLUMN = "text"  # the field of JSON lines, parquet files and hub datasets that holds the text
VAL_FRACTION = 0.05  # documents held out when the source gives no validation text
