"""Building a module whose weights a checkpoint is about to replace.

A run's checkpoint records the concrete architecture in its hyperparameters, so the module it
describes can be built from them alone; its weights then come from the checkpoint. The
``pretrained`` source those hyperparameters name (a pretraining run's checkpoint, a BERT folder or
a hub name) is provenance at that point: reading it again would cost a load of weights that are
thrown away, and would fail where the source is not at hand (another machine, no hub access, the
pretraining run moved or deleted). ``load_from_checkpoint`` and the command line's evaluation of a
``--ckpt_path`` build the module inside ``weights_from_checkpoint()``; the modules ask
``reads_pretrained()`` before reading their source.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_FROM_CHECKPOINT: ContextVar[bool] = ContextVar("tiedemb_weights_from_checkpoint", default=False)


@contextmanager
def weights_from_checkpoint() -> Iterator[None]:
    """Modules built inside this block take their weights from a checkpoint, not their source."""
    token = _FROM_CHECKPOINT.set(True)
    try:
        yield
    finally:
        _FROM_CHECKPOINT.reset(token)


def reads_pretrained() -> bool:
    """Whether a module being built now should read its ``pretrained`` source."""
    return not _FROM_CHECKPOINT.get()
