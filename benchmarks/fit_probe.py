"""A Lightning callback that measures a ``main.py fit`` run for ``benchmarks/gpu.py``.

Training logs throughput through Lightning's ThroughputMonitor (``train/device/items_per_sec``,
``train/device/flops_per_sec``, ``train/device/mfu``), a rolling window sampled every ``log_every_n_steps``,
and logs no memory figure.
This probe adds, once at the end of training and into the same loggers (so into the run's CSV):

* ``bench/tokens_per_sec``, ``bench/flops_per_sec``, ``bench/mfu``, ``bench/util``: over all steps
  after the first ``warmup_steps``, timed between two device synchronisations, so the figure is the
  device's sustained rate and not a sample of single steps. FLOPs are counted as the module counts
  them (``tiedemb.modules.throughput``: the vocabulary projection only at masked positions for MLM).
  ``bench/mfu`` is against the device's dense 16-bit spec peak where known (H100, H200, A100 with a
  16-bit precision), ``bench/util`` against ``peak_flops`` when given (``benchmarks/gpu.py`` passes
  the matrix-product peak that ``train_step.py`` measured in the same dtype).
* ``bench/peak_memory_bytes``: ``torch.cuda.max_memory_allocated`` over training on CUDA (reset when
  training starts, so it is the training peak: weights, gradients, optimiser state, activations);
  on CPU the process's peak resident set size, a much coarser figure (everything the process ever
  held, the interpreter and libraries included). ``bench/peak_memory_kind`` says which (1 = CUDA
  allocator, 0 = RSS), since a CSV holds numbers only.

Used from the command line, with this folder on ``PYTHONPATH``::

    PYTHONPATH=benchmarks python main.py fit ... \\
        --trainer.callbacks='[{"class_path": "fit_probe.FitProbe", "init_args": {"warmup_steps": 20}}]'
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.throughput import get_available_flops

from tiedemb.modules.throughput import MatmulWeights

IGNORE_INDEX = -100  # label of positions without a loss (the collators' convention)


class FitProbe(L.Callback):
    def __init__(self, warmup_steps: int = 10, peak_flops: float | None = None) -> None:
        self.warmup_steps = warmup_steps
        self.peak_flops = peak_flops
        self._weights: MatmulWeights | None = None
        self._causal = False
        self._start: float | None = None  # end of the last warm-up step
        self._end: float | None = None  # end of the last timed step
        self._tokens = 0
        self._steps = 0
        self._dense_flops = 0.0  # FLOPs known without looking at the labels
        self._targets: torch.Tensor | None = None  # MLM: masked positions, summed on the device (no sync per step)
        self._validations: list[tuple[float, float]] = []
        self._validation_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Counted from the full-size model before any wrapper flattens it, as the module does.
        self._weights = MatmulWeights.of(pl_module.model)
        self._causal = bool(pl_module.config.causal)
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step < self.warmup_steps:
            return
        # The training step already waits for the device (the module checks that the loss is
        # finite), so synchronising here costs next to nothing.
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        now = time.perf_counter()
        if self._start is None:
            self._start = now
            return
        self._end = now
        batch_size, seq_len = batch["input_ids"].shape
        self._tokens += batch_size * seq_len
        self._steps += 1
        if self._causal:
            self._dense_flops += self._weights.training_flops(batch_size, seq_len)
        else:
            # training_flops is linear in the output positions: the dense part now, the
            # per-output part once the masked count is read at the end.
            self._dense_flops += self._weights.training_flops(batch_size, seq_len, output_positions=0)
            masked = (batch["labels"] != IGNORE_INDEX).sum()
            self._targets = masked if self._targets is None else self._targets + masked

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._validation_start is not None:
            self._validations.append((self._validation_start, time.perf_counter()))
        self._validation_start = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = pl_module.device
        metrics: dict[str, float] = {}
        if self._start is not None and self._end is not None:
            # Validation that ran between two timed steps is not training time.
            inside = sum(max(0.0, min(end, self._end) - max(start, self._start)) for start, end in self._validations)
            seconds = self._end - self._start - inside
            flops = self._dense_flops
            if self._targets is not None:
                flops += 6 * self._weights.per_output * int(self._targets)
            metrics.update(
                {
                    "bench/timed_steps": float(self._steps),
                    "bench/seconds": seconds,
                    "bench/tokens_per_sec": self._tokens / seconds,
                    "bench/flops_per_sec": flops / seconds,
                }
            )
            dtype = torch.bfloat16 if "bf16" in str(trainer.precision) else torch.float32
            spec = get_available_flops(device, dtype)  # Lightning's table; None for a device it does not name
            if spec:
                metrics["bench/mfu"] = flops / seconds / spec
            if self.peak_flops:
                metrics["bench/util"] = flops / seconds / self.peak_flops
        if device.type == "cuda":
            metrics["bench/peak_memory_bytes"] = float(torch.cuda.max_memory_allocated(device))
            metrics["bench/peak_memory_kind"] = 1.0
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
            metrics["bench/peak_memory_bytes"] = float(rss if sys.platform == "darwin" else rss * 1024)
            metrics["bench/peak_memory_kind"] = 0.0
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
            logger.save()
