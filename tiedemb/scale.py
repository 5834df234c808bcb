"""``python -m tiedemb.scale CHECKPOINT OUTPUT``: one single-device checkpoint from any strategy's.

The command's documented name; the work is ``tiedemb.training.consolidate``.
"""

from __future__ import annotations

import sys

from tiedemb.training.consolidate import main, parser  # noqa: F401 - parser: the command's options

if __name__ == "__main__":
    sys.exit(main())
