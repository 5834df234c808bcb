"""Every process's global random-number state in checkpoints, put back when training resumes."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

log = logging.getLogger("tiedemb")


def _local_random_state() -> dict[str, Any]:
    """This process's global RNG states, as tensors and plain values (loadable with weights_only)."""
    kind, keys, position, has_gauss, cached = np.random.get_state()
    version, python_state, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [
            str(kind),
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(position),
            int(has_gauss),
            float(cached),
        ],
        "python": [int(version), list(python_state), gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_local_random_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    version, python_state, gauss = state["python"]
    random.setstate((version, tuple(python_state), gauss))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


class RandomState(Callback):
    """Keeps every process's global RNG state in checkpoints and restores it on resume.

    Lightning does not store RNG states, so without this a resumed run re-seeds and its
    dropout masks differ from an uninterrupted run's. States are restored in ``on_train_start``:
    after the sanity check and the data loaders' setup, right before the next training step.
    The data loaders own their generators (``tiedemb.data.sampling.loader_generator``), so
    nothing between a checkpoint and the next step draws from the global RNGs.
    """

    def __init__(self) -> None:
        self._pending: list[dict[str, Any]] | None = None

    def state_dict(self) -> dict[str, Any]:
        local = _local_random_state()
        if (
            torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        ):
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, local)
            return {"ranks": gathered}
        return {"ranks": [local]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = list(state_dict.get("ranks") or []) or None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending is None:
            return
        rank = trainer.global_rank
        if rank < len(self._pending):
            _set_local_random_state(self._pending[rank])
        else:
            log.warning(
                "the checkpoint holds random states of %d processes, this run has %d: process %d re-seeds",
                len(self._pending),
                trainer.world_size,
                rank,
            )
        self._pending = None
