"""Batches of examples of similar length, for data padded per batch (GLUE).

A batch is padded to its longest example, so a batch drawn uniformly at random computes on much
padding: MRPC's training pairs are 19 to 103 BERT tokens long (mean 53), and its random batches of
32 are padded to 80 on average (293k tokens an epoch for 195k real ones; 469k padded to 128 as
transformers' run_glue.py does by default). Grouping examples of similar length into batches
removes most of it (windows of 50 batches: 200k tokens an epoch):

1. each epoch starts from the permutation the plain sampler would draw for it (``seed + epoch``);
2. that order is cut into windows of ``window`` batches, each window is sorted by length (longest
   first, ties in permutation order) and cut into batches, so a batch holds examples that are
   neighbours in length among ``window`` batches' worth of random examples;
3. the batches are shuffled (with the same generator), so lengths do not rise and fall through the
   epoch; examples that fill no whole batch form the last, partial batch, as without grouping.

Every example still appears exactly once per epoch (before a distributed sampler's padding), and
the order depends on ``(seed, epoch)`` alone, so a stopped run resumes on the same batches
(``tiedemb.data.sampling``). What changes is which examples share a batch, so training results
differ from those of uniform batches by more than rounding: the option is off by default.

With several processes a "batch" here is the global one (``batch_size x num_replicas`` examples,
consecutive in the grouped order), which the usual strided split gives each process a share of,
so every process's batch has similar lengths too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence, Sized
from functools import partial
from typing import Any

import torch
from torch.utils.data import DistributedSampler

from tiedemb.data.sampling import ResumableSampler
from tiedemb.errors import UserError


def grouped_order(
    permutation: Sequence[int], lengths: Sequence[int], batch_size: int, window: int, generator: torch.Generator
) -> list[int]:
    """``permutation`` rearranged into batches of similar length (see the module docstring).

    ``window``: batches per sorted window; ``generator`` shuffles the batches.
    """
    full = len(permutation) // batch_size * batch_size
    span = window * batch_size
    batches: list[list[int]] = []
    for start in range(0, full, span):
        chunk = list(permutation[start : min(start + span, full)])
        chunk.sort(key=lambda index: -lengths[index])  # stable: equal lengths keep the random order
        batches += [chunk[offset : offset + batch_size] for offset in range(0, len(chunk), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [index for position in shuffled for index in batches[position]] + list(permutation[full:])


class _GroupedPermutation(DistributedSampler):
    """``DistributedSampler`` whose shuffled epoch order is grouped by length.

    Kept separate from ``LengthGroupedSampler`` so that ``ResumableSampler.__iter__``'s
    ``super().__iter__()`` reaches this order through the method resolution order, and the resume
    logic (start offset, keyed indices) is ``ResumableSampler``'s own, not a copy.
    """

    lengths: Sequence[int]
    batch_size: int
    window: int

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return super().__iter__()
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        permutation = torch.randperm(len(self.lengths), generator=generator).tolist()
        order = grouped_order(permutation, self.lengths, self.batch_size * self.num_replicas, self.window, generator)
        # As DistributedSampler: pad (repeating from the start) or cut to a multiple of the process
        # count, then take every num_replicas-th example from this process's rank.
        if self.drop_last:
            order = order[: self.total_size]
        else:
            order += (order * math.ceil(self.total_size / len(order)))[: self.total_size - len(order)]
        return iter(order[self.rank : self.total_size : self.num_replicas])


class LengthGroupedSampler(ResumableSampler, _GroupedPermutation):
    """A ``ResumableSampler`` (seeded, resumable, distributed) whose batches hold similar lengths.

    ``lengths[i]`` is example ``i``'s length; ``batch_size`` must be the loader's (per process);
    ``window`` is the number of batches sorted together: larger windows pad less and mix less.
    """

    def __init__(self, dataset: Sized, *, lengths: Sequence[int], batch_size: int, window: int, **options: Any) -> None:
        if len(lengths) != len(dataset):
            raise ValueError(f"{len(lengths)} lengths for {len(dataset)} examples")
        if batch_size < 1 or window < 1:
            raise UserError(f"length grouping needs batch_size >= 1 and window >= 1, got {batch_size} and {window}")
        self.lengths, self.batch_size, self.window = list(lengths), batch_size, window
        super().__init__(dataset, **options)


def length_grouped(lengths: Sequence[int], batch_size: int, window: int) -> Callable[..., LengthGroupedSampler] | None:
    """A ``sampler_factory`` for ``ResumableTraining.resumable_sampler``; None when ``window`` is 0 (off)."""
    if window == 0:
        return None
    return partial(LengthGroupedSampler, lengths=lengths, batch_size=batch_size, window=window)


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Indices by decreasing length (ties in index order): the order evaluation can read examples in.

    Evaluation results do not depend on the order (metrics are sums, prediction files are written
    by example index), but padding does: sorted, each batch pads to nearly its own length. Longest
    first, so the largest batch is met at the start.
    """
    return sorted(range(len(lengths)), key=lambda index: -lengths[index])
