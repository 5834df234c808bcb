"""The speed path: operations the model calls that equal a plain PyTorch one, done faster.

Each name here has a plain reference, which its tests compare it with:

============================  =================================================================
here                          plain reference
============================  =================================================================
``dropout`` / ``Dropout``     ``F.dropout`` / ``nn.Dropout`` (same drop rate; on the CPU the
                              mask is drawn from whole random words instead of ``bernoulli_``)
``attention``                 ``F.scaled_dot_product_attention`` (written out on the CPU in
                              training, so its dropout uses the cheaper mask)
``linear_cross_entropy``      ``F.cross_entropy(F.linear(x, W, b), targets)`` without building
                              the (rows, vocab) logits
``take_rows``                 indexing the rows of the last block's output that the loss reads,
                              done *before* that block's feed-forward, so the rest is skipped
============================  =================================================================

Off the CPU and under ``torch.compile`` the first two are torch's own functions. The figures
behind each choice are in benchmarks/RESULTS.md; ``tests/nn/test_dropout.py``,
``tests/nn/test_loss.py`` and ``tests/nn/test_classifier_first_rows.py`` hold the comparisons.
"""

from __future__ import annotations

from tiedemb.nn.fast.dropout import Dropout, attention, dropout
from tiedemb.nn.fast.rows import Positions, take_rows
from tiedemb.nn.fast.sliced_loss import linear_cross_entropy

__all__ = ["Dropout", "Positions", "attention", "dropout", "linear_cross_entropy", "take_rows"]
