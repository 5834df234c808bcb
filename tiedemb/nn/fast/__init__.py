"""The CPU speed path: operations the model calls that equal a plain PyTorch one, done faster.

- ``dropout``: ``F.dropout`` with the CPU mask drawn from whole random words; GPUs and
  ``torch.compile`` keep torch's.
- ``sliced_loss``: ``F.cross_entropy(F.linear(x, W, b), targets)`` without the (rows, vocab) logits.

The figures behind each are in benchmarks/RESULTS.md; tests/nn/ compares each with its reference.
"""
