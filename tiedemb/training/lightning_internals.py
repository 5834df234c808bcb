"""The places tiedemb reaches into Lightning's private state, each for want of a public API.

Every one is listed in docs/architecture.md ("Private touch points") with the reason no public API
serves; tests/test_private_touch_points.py fails, naming it, when a Lightning upgrade renames or
reshapes one, instead of letting the behaviour change silently. The text of jsonargparse's errors
(``tiedemb.training.arguments``) is the one other.
"""

from __future__ import annotations

import lightning as L


def stop_after_this_step(trainer: L.Trainer, stop: bool = True) -> None:
    """Have the fit stop after the current step as on SIGTERM (``SIGTERMException``), or take that back.

    Lightning reads this flag (``trainer.received_sigterm``, public to read only) after every
    training and validation batch; its own SIGTERM handler is the only public way to set it.
    """
    trainer._signal_connector.received_sigterm = stop
