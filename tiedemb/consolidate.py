"""``python -m tiedemb.consolidate CHECKPOINT OUTPUT``: one single-device checkpoint from any strategy's.

The command's documented name; the work is ``tiedemb.training.single_checkpoint``.
"""

from __future__ import annotations

import sys

from tiedemb.training.single_checkpoint import main, parser  # noqa: F401 - parser: the command's options

if __name__ == "__main__":
    sys.exit(main())
