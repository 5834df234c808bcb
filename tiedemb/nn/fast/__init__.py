"""The speed path: operations the model calls that equal a plain PyTorch one, done faster.

- ``dropout`` / ``Dropout``: ``F.dropout`` / ``nn.Dropout``, the CPU mask drawn from whole random words;
- ``attention``: ``F.scaled_dot_product_attention``, written out on the CPU in training for that mask;
- ``linear_cross_entropy``: ``F.cross_entropy(F.linear(x, W, b), targets)`` without the (rows, vocab) logits;
- ``take_rows``: the rows the loss reads, taken before the last block's feed-forward, so the rest is skipped.

Off the CPU and under ``torch.compile`` the first two are torch's own. The figures behind each
choice are in benchmarks/RESULTS.md; tests/nn/ compares each with its reference.
"""

from __future__ import annotations

from tiedemb.nn.fast.dropout import Dropout, attention, dropout
from tiedemb.nn.fast.rows import Positions, take_rows
from tiedemb.nn.fast.sliced_loss import linear_cross_entropy

__all__ = ["Dropout", "Positions", "attention", "dropout", "linear_cross_entropy", "take_rows"]
