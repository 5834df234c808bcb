"""The pretraining text options checked, and defaulted, before any text is read.

Kept apart from ``text`` and ``text_files`` so that the data module's signature and first checks
need neither ``datasets`` nor ``pyarrow``: a run on the embedded corpus never imports them.
"""

from __future__ import annotations

from tiedemb.errors import check_choice

TEXT_COLUMN = "text"
"""The field of JSON lines, parquet files and hub datasets that holds the text, unless told otherwise."""
VAL_FRACTION = 0.05
"""Documents held out for validation when the source gives no validation text."""
ENCODING_ERRORS = ("strict", "replace")
"""What ``encoding_errors`` accepts: refuse bytes that are not UTF-8, or read them as U+FFFD."""


def check_encoding_errors(value: str) -> str:
    """Return ``value`` if it is one of ``ENCODING_ERRORS``, else raise naming the option."""
    return check_choice("data.encoding_errors", value, ENCODING_ERRORS)
