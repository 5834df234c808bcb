"""Training data order that survives a restart, and batches of similar length for padded data (GLUE).

``ResumableSampler`` draws each epoch's order from ``(seed, epoch)`` alone and can start at an
offset; ``KeyedDataset`` tags each example with its ``(epoch, index)``, from which the MLM collator
seeds its mask; ``ResumableTraining`` stores the fit loop's position in each checkpoint. (Lightning's
own loader states are a batch ahead of the loop, and are skipped when ``configure_optimizers`` reads
``trainer.estimated_stepping_batches``, Lightning issue 20550.)

A ``window`` cuts padding: each epoch's permutation is cut into windows of ``window`` batches, each
sorted by length and cut into batches, and the batches shuffled (off by default: which examples
share a batch changes the results).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler

log = logging.getLogger("tiedemb.data")

SAMPLE_KEY = "sample_key"  # the field KeyedDataset adds to each example: its (epoch, index)

_MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def example_seed(seed: int, epoch: int, index: int) -> int:
    """A generator seed for one example in one epoch, hashed to the 32 bits torch's CPU generator uses."""
    value = 0
    for part in (seed, epoch, index):
        value = _splitmix64(value ^ (part & _MASK64))
    return value & 0xFFFFFFFF


class KeyedDataset(Dataset):
    """``dataset`` whose examples carry their ``(epoch, index)`` key; a plain index (evaluation)
    counts as epoch 0, so evaluation masks are the same every time."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int] | int) -> dict[str, Any]:
        epoch, index = key if isinstance(key, tuple) else (0, int(key))
        return {**self.dataset[index], SAMPLE_KEY: (epoch, index)}


class ResumableSampler(DistributedSampler):
    """Each epoch a permutation seeded by ``(seed, epoch)``, this process's share of it, from an offset,
    as ``(epoch, index)`` keys (plain indices with ``keyed=False``). A ``DistributedSampler``, so that
    Lightning neither replaces nor wraps it under DDP."""

    def __init__(
        self,
        dataset: Sized,
        *,
        keyed: bool = True,
        lengths: Sequence[int] = (),
        batch_size: int = 1,
        window: int = 0,
        **options: Any,
    ) -> None:
        super().__init__(dataset, **{"num_replicas": 1, "rank": 0, **options})  # no process group needed
        self.keyed, self.lengths, self.batch_size, self.window = keyed, list(lengths), batch_size, window
        self.resume_epoch: int | None = None
        self.resume_offset = 0

    def resume_at(self, epoch: int, offset: int) -> None:
        self.set_epoch(epoch)
        self.resume_epoch, self.resume_offset = epoch, max(0, offset)

    def share(self) -> list[int]:
        if not (self.window and self.shuffle):
            return list(super().__iter__())
        # Not transformers' get_length_grouped_indices: it leaves each window's batches longest first.
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        permutation = torch.randperm(len(self.lengths), generator=generator).tolist()
        order = grouped_order(permutation, self.lengths, self.batch_size * self.num_replicas, self.window, generator)
        # as DistributedSampler: pad or cut to a multiple of the process count, then stride by rank
        if self.drop_last:
            order = order[: self.total_size]
        else:
            order += (order * math.ceil(self.total_size / len(order)))[: self.total_size - len(order)]
        return order[self.rank : self.total_size : self.num_replicas]

    def __iter__(self):
        # every iterator of the resumed epoch starts at the offset: Lightning may create several
        indices = self.share()[self.resume_offset if self.epoch == self.resume_epoch else 0 :]
        return iter([(self.epoch, index) for index in indices] if self.keyed else indices)


def grouped_order(
    permutation: Sequence[int], lengths: Sequence[int], batch_size: int, window: int, generator: torch.Generator
) -> list[int]:
    """``permutation`` rearranged into batches of similar length, ``window`` batches sorted together."""
    full = len(permutation) // batch_size * batch_size
    span = window * batch_size
    batches: list[list[int]] = []
    for start in range(0, full, span):
        chunk = sorted(permutation[start : min(start + span, full)], key=lambda index: -lengths[index])  # stable
        batches += [chunk[offset : offset + batch_size] for offset in range(0, len(chunk), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [index for position in shuffled for index in batches[position]] + list(permutation[full:])


class ResumableTraining:
    """Mixin for a LightningDataModule whose training sampler comes from ``resumable_sampler``."""

    _train_sampler: ResumableSampler | None = None
    _train_batch_size: int = 1
    _resume_position: dict[str, int] | None = None

    def resumable_sampler(
        self,
        dataset: Sized,
        *,
        batch_size: int,
        seed: int,
        keyed: bool = True,
        drop_last: bool = False,
        lengths: Sequence[int] = (),
        window: int = 0,
    ) -> ResumableSampler:
        trainer = getattr(self, "trainer", None)
        options = dict(
            seed=seed, keyed=keyed, drop_last=drop_last, lengths=lengths, batch_size=batch_size, window=window
        )
        options |= dict(num_replicas=trainer.world_size, rank=trainer.global_rank) if trainer else {}
        sampler = ResumableSampler(dataset, **options)
        self._train_sampler, self._train_batch_size = sampler, batch_size
        self._apply_position()
        return sampler

    def state_dict(self) -> dict[str, Any]:
        """The position from the loop's own progress (batches whose step finished this epoch); a
        finished epoch resumes at the start of the next one."""
        trainer, sampler = getattr(self, "trainer", None), self._train_sampler
        if sampler is None or trainer is None:
            return {}
        batches = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        epoch = sampler.epoch
        if batches and batches >= trainer.num_training_batches:
            epoch, batches = epoch + 1, 0
        offset = batches * self._train_batch_size
        return {"position": dict(epoch=epoch, offset=offset, seed=sampler.seed, num_replicas=sampler.num_replicas)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_position = state_dict.get("position")
        self._apply_position()

    def _apply_position(self) -> None:
        """Point the sampler at the checkpoint's position, as closely as a changed seed or process count allows."""
        position, sampler = self._resume_position, self._train_sampler
        if position is None or sampler is None:
            return
        # The permutation is shared by all processes, so the examples consumed overall carry over.
        offset = position["offset"] * position["num_replicas"] // sampler.num_replicas
        if (position["num_replicas"], position["seed"]) != (sampler.num_replicas, sampler.seed):
            log.warning(
                "resuming with another data seed or process count than the checkpoint's (%s, %s processes): "
                "the data order continues approximately",
                *(position["seed"], position["num_replicas"]),
            )
        sampler.resume_at(position["epoch"], offset)
