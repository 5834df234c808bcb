"""Training data order that survives a restart: seeded epochs, resumable part-way through.

A run stopped at any step and restarted from its checkpoint must see exactly the batches an
uninterrupted run would have seen. Three pieces make that hold:

* ``ResumableSampler`` draws each epoch's order from ``(seed, epoch)`` alone and can start an
  epoch at an offset, so a restarted run skips what it already trained on.
* ``KeyedDataset`` tags every example with its ``(epoch, index)`` key, from which the MLM
  collator derives that example's masking randomness; masks therefore do not depend on the
  global RNG, on worker processes, or on how many batches came before.
* ``loader_position`` / ``ResumePosition`` turn the fit loop's progress into a small state the
  datamodule stores in each checkpoint and applies to the sampler when the run resumes.

Lightning 2.x can also restore loaders that implement ``state_dict`` themselves, but its
training fetcher runs a batch ahead of the loop (so a loader counting the batches it handed out
is one ahead of training), and it skips restoring loader states when ``configure_optimizers``
reads ``trainer.estimated_stepping_batches`` (as ``PretrainModule`` does; Lightning issue
20550). Counting from the loop's own progress avoids both problems.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sized
from dataclasses import asdict, dataclass
from typing import Any

import lightning as L
import torch
from torch.utils.data import Dataset, DistributedSampler

log = logging.getLogger("tiedemb.data")

SAMPLE_KEY = "sample_key"
"""Field ``KeyedDataset`` adds to each example: its ``(epoch, index)``."""

_MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def example_seed(seed: int, epoch: int, index: int) -> int:
    """A generator seed for one example in one epoch.

    Hashed down to 32 bits because torch's CPU generator only uses the low 32 bits of a seed:
    packing (seed, epoch, index) into separate bit fields would make epochs collide.
    """
    value = 0
    for part in (seed, epoch, index):
        value = _splitmix64(value ^ (part & _MASK64))
    return value & 0xFFFFFFFF


class KeyedDataset(Dataset):
    """``dataset`` whose examples carry their ``(epoch, index)`` key.

    Indexed by the keys ``ResumableSampler`` yields, or by a plain index (evaluation loaders,
    and samplers Lightning substitutes), which counts as epoch 0, so evaluation masks are the
    same every time.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int] | int) -> dict[str, Any]:
        epoch, index = key if isinstance(key, tuple) else (0, int(key))
        example = dict(self.dataset[index])
        example[SAMPLE_KEY] = (epoch, index)
        return example


class ResumableSampler(DistributedSampler):
    """Each epoch a permutation seeded by ``(seed, epoch)``, this process's share of it, from an offset.

    It yields ``(epoch, index)`` keys for ``KeyedDataset``. Its length is the whole epoch's
    share even when resuming part-way, which is what Lightning's progress counting expects.
    It is a ``DistributedSampler`` so that Lightning neither replaces nor wraps it under DDP;
    ``num_replicas`` and ``rank`` are given explicitly, so no process group is needed.
    """

    def __init__(
        self,
        dataset: Sized,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
        keyed: bool = True,
    ) -> None:
        super().__init__(
            dataset,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,  # type: ignore[arg-type]
            drop_last=drop_last,
        )
        self.keyed = keyed  # False: plain indices, for datasets that need no per-example randomness
        self.resume_epoch: int | None = None
        self.resume_offset = 0

    def resume_at(self, epoch: int, offset: int) -> None:
        """Start epoch ``epoch`` at its ``offset``-th example (of this process's share)."""
        self.set_epoch(epoch)
        self.resume_epoch, self.resume_offset = epoch, max(0, offset)

    def __iter__(self) -> Iterator[tuple[int, int] | int]:  # type: ignore[override]
        epoch = self.epoch
        indices = list(super().__iter__())
        # Any iterator created for the resumed epoch starts at the offset: Lightning may create
        # more than one before the first batch is used.
        start = self.resume_offset if epoch == self.resume_epoch else 0
        if not self.keyed:
            return iter(indices[start:])
        return iter([(epoch, index) for index in indices[start:]])


@dataclass
class ResumePosition:
    """Where training stood in the data when a checkpoint was written."""

    epoch: int
    offset: int  # examples of the epoch this process had trained on
    seed: int
    num_replicas: int

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ResumePosition | None:
        try:
            return cls(**{key: int(state[key]) for key in ("epoch", "offset", "seed", "num_replicas")})
        except (KeyError, TypeError, ValueError):
            return None


def loader_position(trainer: L.Trainer, sampler: ResumableSampler, batch_size: int) -> ResumePosition:
    """The data position of a fit in progress, counted from the loop's own progress.

    ``processed`` counts the batches whose training step finished in this epoch, which is
    right both for checkpoints written after a step and for those written after validation.
    A finished epoch resumes at the start of the next one.
    """
    batches = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    epoch = sampler.epoch
    if batches and batches >= trainer.num_training_batches:
        epoch, batches = epoch + 1, 0
    return ResumePosition(
        epoch=epoch, offset=batches * batch_size, seed=sampler.seed, num_replicas=sampler.num_replicas
    )


def apply_position(sampler: ResumableSampler, position: ResumePosition) -> None:
    """Point ``sampler`` at ``position``; a changed seed or process count is followed as closely as possible."""
    offset = position.offset
    if position.num_replicas != sampler.num_replicas:
        # The permutation is shared by all processes, so the examples consumed overall carry over.
        offset = position.offset * position.num_replicas // sampler.num_replicas
        log.warning(
            "resuming on %d processes a run checkpointed on %d: the data order continues approximately",
            sampler.num_replicas,
            position.num_replicas,
        )
    if position.seed != sampler.seed:
        log.warning(
            "resuming with data seed %d, the checkpoint used %d: the epoch continues in a new order",
            sampler.seed,
            position.seed,
        )
    sampler.resume_at(position.epoch, offset)


def loader_generator(seed: int) -> torch.Generator:
    """A generator for a DataLoader's own seeding, so creating its iterator leaves the global RNG alone.

    Without one, every ``iter(loader)`` draws from the global RNG, and a resumed run (which
    creates its iterators at other moments) would drift from an uninterrupted one.
    """
    return torch.Generator().manual_seed(seed)


class ResumableTraining:
    """Mixin for a LightningDataModule whose training order survives restarts.

    ``train_dataloader`` builds its sampler with ``resumable_sampler``; the mixin's
    ``state_dict`` (stored by Lightning in every checkpoint) records where training stands in
    it, and ``load_state_dict`` points the sampler there when a run resumes.
    """

    _train_sampler: ResumableSampler | None = None
    _train_batch_size: int = 1
    _resume_position: ResumePosition | None = None

    def resumable_sampler(
        self,
        dataset: Sized,
        *,
        batch_size: int,
        seed: int,
        keyed: bool = True,
        drop_last: bool = False,
        sampler_factory: Callable[..., ResumableSampler] | None = None,
    ) -> ResumableSampler:
        """The shuffling sampler of the training loader, sharded over the trainer's processes.

        ``sampler_factory`` builds a ``ResumableSampler`` subclass that draws each epoch's order
        differently (``tiedemb.data.length_grouping``); it gets the same arguments.
        """
        trainer = getattr(self, "trainer", None)
        sampler = (sampler_factory or ResumableSampler)(
            dataset,
            seed=seed,
            keyed=keyed,
            drop_last=drop_last,
            num_replicas=trainer.world_size if trainer else 1,
            rank=trainer.global_rank if trainer else 0,
        )
        if self._resume_position is not None:
            apply_position(sampler, self._resume_position)
        self._train_sampler, self._train_batch_size = sampler, batch_size
        return sampler

    def state_dict(self) -> dict[str, Any]:
        trainer = getattr(self, "trainer", None)
        if self._train_sampler is None or trainer is None:
            return {}
        return {"position": loader_position(trainer, self._train_sampler, self._train_batch_size).state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_position = ResumePosition.from_state(state_dict.get("position") or {})
        if self._resume_position is not None and self._train_sampler is not None:
            apply_position(self._train_sampler, self._resume_position)
