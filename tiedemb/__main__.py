"""``python -m tiedemb SUBCOMMAND ...``: the ``tiedemb`` command (``tiedemb.command``)."""

import sys

from tiedemb.command import main

if __name__ == "__main__":
    sys.exit(main())
