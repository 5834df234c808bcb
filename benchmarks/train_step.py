"""One training step of tiedemb against transformers at the same size, measured side by side.

A step is forward, backward, AdamW update (and the learning-rate schedule's tick) on the same
batch, with the same dtype and thread count, and the same optimiser for both (tiedemb's
``adamw_with_schedule``: fused AdamW, no decay on vectors). The two models alternate in one
process (A B A B ..., the order swapped every round), so load from other processes on a shared
machine hits both alike; step times are medians over the timed steps, and the speed-up is the
median of the per-round ratios.

* MLM: ``PretrainModule`` with BERT's layout (post-norm, learned positions, two segments, tied
  decoder behind BERT's dense + GELU + LayerNorm transform, output bias) against
  ``BertForMaskedLM``; 15% of tokens masked (80/10/10), labels -100 elsewhere.
* CLM: ``PretrainModule`` pre-norm, learned positions, causal, tied, against ``GPT2LMHeadModel``.

Parameter counts are checked equal (for CLM, but for the LayerNorm tiedemb applies to the
embedding sum, which GPT-2 lacks: 2 x hidden). tiedemb's step is its training path
(``PretrainModule.training_loss``); transformers' is ``model(**batch).loss``.

Peak memory: on CPU, the largest number of bytes held by live tensors at once during one step
(parameters, gradients, optimiser state, batch, activations and temporaries), counted by a
dispatch mode that sees every tensor any operator creates, forward and backward; memory a kernel
uses without making a tensor, and allocator overhead, are not in it. On CUDA,
``torch.cuda.max_memory_allocated`` over the step (the same quantity, from the allocator).

Utilisation: the model FLOPs each model computes in a step (``tiedemb.modules.throughput``: 6 per
weight entry per row it multiplies, plus attention; transformers projects every position onto
the vocabulary, tiedemb only the masked ones for MLM) per second, over the FLOP/s of a square
matrix product (2048^2 on CPU, 8192^2 on GPU, the benchmark's dtype) measured at the start.

    python benchmarks/train_step.py                      # CPU, 2 threads, small size, both objectives
    python benchmarks/train_step.py --size base --device cuda --dtype bf16 --batch-size 256

On a busy machine, ``--threads 1 --clock cpu`` (with ``OMP_WAIT_POLICY=PASSIVE``) times each step
by this process's CPU time, which other processes disturb far less than wall time.

The ``sys`` column is the share of the step's CPU time spent in the kernel, almost all of it
mapping fresh pages for large temporaries that glibc's ``malloc`` handed back to the kernel after
the previous step (``benchmarks/allocator.py``). ``--keep-freed-memory`` makes glibc keep freed
memory in the process, for both models, so the ratio measures the computation alone; the default
measures what a process with the stock allocator sees.

``--full-logits`` makes tiedemb compute its loss from the whole logits (what its sliced loss
avoids), to measure the difference in time and peak memory.

``--profile N`` profiles N more steps of each model after the timed ones (``torch.profiler``) and
prints where each step's time goes: the share of matrix products, which bounds what any change
outside them could save, and the operators that take the most time (``benchmarks/op_breakdown.py``).

``--json FILE`` also writes the table as JSON, with tokens/s (batch x sequence length over the
median step time) and, where the device's dense 16-bit peak is known (H100, H200, A100 in bf16),
MFU against that peak beside the utilisation against the measured matrix product
(``benchmarks/gpu.py`` reads it).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from allocator import CpuTime, add_option, keep_freed_memory
from lightning.fabric.utilities.throughput import get_available_flops
from op_breakdown import op_breakdown
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tiedemb import PretrainModule
from tiedemb.data.collate import MaskingCollator
from tiedemb.modules.optim import adamw_with_schedule
from tiedemb.modules.throughput import MatmulWeights
from tiedemb.nn.fast.sliced_loss import kept_buffers

SIZES = {
    "small": dict(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072),
}
VOCAB = 30522
MAX_POSITIONS = 512
SPECIAL_IDS = (0, 100, 101, 102, 103)  # BERT uncased: [PAD] [UNK] [CLS] [SEP] [MASK]
OPTIMISER = dict(
    learning_rate=1e-4,
    weight_decay=0.01,
    betas=(0.9, 0.999),
    eps=1e-6,
    total_steps=10_000,
    warmup_steps=100,
    decay="linear",
    min_lr_ratio=0.0,
)


# -- the two models -------------------------------------------------------------------------------
def tiedemb_model(objective: str, size: dict, dropout: float, compile_model: bool = False) -> PretrainModule:
    common = dict(
        vocab_size=VOCAB,
        max_position_embeddings=MAX_POSITIONS,
        dropout=dropout,
        compile=compile_model,
        attention_dropout=dropout,
        activation="gelu",
        **size,
    )
    if objective == "mlm":
        return PretrainModule(
            objective="mlm",
            norm_position="post",
            position="learned",
            type_vocab_size=2,
            norm_eps=1e-12,
            head="tied_orth",
            head_bias=True,
            head_activation="gelu",
            head_norm=True,
            output_bias=True,
            **common,
        )
    return PretrainModule(
        objective="clm",
        norm_position="pre",
        position="learned",
        type_vocab_size=0,
        norm_eps=1e-5,
        head="tied",
        **common,
    )


def transformers_model(objective: str, size: dict, dropout: float) -> torch.nn.Module:
    import transformers

    if objective == "mlm":
        config = transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=size["hidden_size"],
            num_hidden_layers=size["num_layers"],
            num_attention_heads=size["num_heads"],
            intermediate_size=size["intermediate_size"],
            max_position_embeddings=MAX_POSITIONS,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            hidden_act="gelu",
        )
        return transformers.BertForMaskedLM(config)
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=size["hidden_size"],
        n_layer=size["num_layers"],
        n_head=size["num_heads"],
        n_inner=size["intermediate_size"],
        n_positions=MAX_POSITIONS,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        activation_function="gelu",
        bos_token_id=None,
        eos_token_id=None,
    )
    return transformers.GPT2LMHeadModel(config)


def make_batch(objective: str, batch_size: int, seq_len: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Unpadded blocks (as pretraining packs them) of random ordinary tokens."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, VOCAB, (batch_size, seq_len), generator=generator)
    if objective == "mlm":
        collator = MaskingCollator(
            vocab_size=VOCAB, mask_token_id=103, pad_token_id=0, special_token_ids=SPECIAL_IDS, generator=generator
        )
        ids, labels = collator.mask(ids)
    else:
        labels = ids.clone()
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device), "labels": labels.to(device)}


@dataclass
class Contender:
    name: str
    model: torch.nn.Module
    loss: Callable[[dict[str, torch.Tensor]], torch.Tensor]
    flops: float  # model FLOPs of one step, as this model computes them
    optimizer: torch.optim.Optimizer | None = None
    scheduler: object | None = None

    def __post_init__(self) -> None:
        schedule = adamw_with_schedule(self.model, **OPTIMISER)
        self.optimizer = schedule["optimizer"]
        self.scheduler = schedule["lr_scheduler"]["scheduler"]

    def step(self, batch: dict[str, torch.Tensor], autocast: contextlib.AbstractContextManager) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = self.loss(batch)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()


def contenders(
    objective: str,
    size: dict,
    dropout: float,
    batch: dict,
    device: torch.device,
    compile_model: bool,
    full_logits: bool = False,
) -> list[Contender]:
    torch.manual_seed(0)
    ours = tiedemb_model(objective, size, dropout, compile_model).to(device)
    ours.configure_model()  # what the Trainer calls at setup: applies model.compile
    theirs = transformers_model(objective, size, dropout).to(device)
    ours.train(), theirs.train()
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # Equal but for one LayerNorm: tiedemb normalises the embedding sum in pre-norm models too,
    # GPT-2 does not (2 x hidden parameters).
    if abs(count(ours) - count(theirs)) > 2 * size["hidden_size"]:
        raise RuntimeError(f"parameter counts differ: tiedemb {count(ours):,} vs transformers {count(theirs):,}")
    batch_size, seq_len = batch["input_ids"].shape
    weights = MatmulWeights.of(ours.model)
    masked = int((batch["labels"] != -100).sum()) if objective == "mlm" else None
    reference = "BertForMaskedLM" if objective == "mlm" else "GPT2LMHeadModel"
    return [
        Contender(
            "tiedemb",
            ours,
            (lambda b: ours(**b).loss) if full_logits else ours.training_loss,
            weights.training_flops(batch_size, seq_len, None if full_logits else masked),
        ),
        # transformers projects every position onto the vocabulary, so its step does more work.
        Contender(reference, theirs, lambda b: theirs(**b).loss, weights.training_flops(batch_size, seq_len)),
    ]


# -- measurement ----------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(
    device: torch.device,
    dtype: torch.dtype,
    size: int,
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = 10,
) -> float:
    """FLOP/s of a square matrix product, the best of ``repeats``: the ceiling the steps are held to."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = clock()
        a @ b
        synchronize(device)
        best = min(best, clock() - start)
    return 2 * size**3 / best


class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of live tensor storage while active, starting from the given tensors.

    Every operator's outputs are seen here (autograd runs the backward on this thread on CPU,
    inside the mode); each storage is counted once, from its creation until it is freed.
    """

    def __init__(self, existing: list[torch.Tensor]) -> None:
        super().__init__()
        self.live: dict[tuple[int, str], int] = {}
        self.current = 0
        self.peak = 0
        for tensor in existing:
            self._track(tensor)

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), str(tensor.device))
        if storage.nbytes() == 0 or key in self.live:
            return
        self.live[key] = storage.nbytes()
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: tuple[int, str]) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value)
        return out


def step_memory(contender: Contender, batch: dict, autocast, device: torch.device) -> int:
    """Peak bytes of one training step, after warm-up (optimiser state exists, gradients were freed)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        contender.step(batch, autocast)
        synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    existing = list(contender.model.parameters()) + list(contender.model.buffers())
    existing += [t for state in contender.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    existing += list(batch.values())
    if isinstance(contender.model, PretrainModule):
        existing += kept_buffers()  # the sliced loss's buffer, kept between steps on the CPU: tiedemb's alone
    with LiveTensorBytes(existing) as tracker:
        contender.step(batch, autocast)
    return tracker.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objective", choices=("mlm", "clm", "both"), default="both")
    parser.add_argument("--size", choices=tuple(SIZES), default="small")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: autocast (mixed precision, fp32 weights), as the Trainer's bf16-mixed",
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed steps of each model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each model first")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout of both models")
    parser.add_argument("--compile", action="store_true", help="torch.compile tiedemb's model (model.compile)")
    parser.add_argument(
        "--full-logits",
        action="store_true",
        help="tiedemb computes its loss from the whole (rows, vocab) logits, as transformers does, "
        "instead of its sliced loss: shows what the sliced loss saves",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the timed steps, profile N steps of each model and print where the time goes",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: this process's CPU time (user + system) instead of wall time; "
        "less disturbed by other processes on a busy machine (CPU only)",
    )
    add_option(parser)
    parser.add_argument("--json", metavar="FILE", help="also write the settings and one record per row here")
    args = parser.parse_args()
    if args.profile < 0:
        parser.error(f"--profile takes a number of steps, 0 or more; got {args.profile}")

    if args.keep_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if dtype == torch.bfloat16:
        autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext
    square = 2048 if device.type == "cpu" else 8192
    peak = matmul_peak(device, dtype, square, clock)
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}"
        f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
        f"{torch.get_num_threads()} threads, {args.dtype}, size {args.size}, "
        f"batch {args.batch_size} x {args.seq_len}, dropout {args.dropout}{', compiled' if args.compile else ''}"
        f"{', tiedemb with full logits' if args.full_logits else ''}"
        f"{', freed memory kept in the process' if args.keep_freed_memory else ''}"
    )
    print(
        f"matrix-product peak ({args.dtype}, {square}^2): {peak / 1e9:.1f} GFLOP/s; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs\n"
    )
    header = (
        f"{'objective':<9} {'model':<16} {'step ms':>9} {'speed-up':>9} {'peak MiB':>9} {'GFLOP/step':>11} "
        f"{'GFLOP/s':>8} {'util':>6} {'sys':>5}"
    )
    print(header)
    print("-" * len(header))
    # The spec-sheet peak, for MFU as training logs it (train/device/mfu): Lightning's table, None off its GPUs.
    spec_peak = get_available_flops(device, torch.bfloat16 if args.dtype == "bf16" else torch.float32)
    records: list[dict] = []
    breakdowns: dict[str, dict] = {}
    objectives = ("mlm", "clm") if args.objective == "both" else (args.objective,)
    for objective in objectives:
        batch = make_batch(objective, args.batch_size, args.seq_len, device)
        pair = contenders(objective, SIZES[args.size], args.dropout, batch, device, args.compile, args.full_logits)
        for _ in range(args.warmup):
            for contender in pair:
                contender.step(batch, autocast())
        times: dict[str, list[float]] = {c.name: [] for c in pair}
        cpu = {c.name: CpuTime() for c in pair}
        for index in range(args.steps):
            # alternate which goes first, so neither always follows the other's cache footprint
            for contender in pair if index % 2 == 0 else pair[::-1]:
                synchronize(device)
                before = os.times()
                start = clock()
                contender.step(batch, autocast())
                synchronize(device)
                times[contender.name].append(clock() - start)
                cpu[contender.name].add(before, os.times())
        memory = {c.name: (None if args.no_memory else step_memory(c, batch, autocast(), device)) for c in pair}
        if args.profile:
            breakdowns[objective] = {
                c.name: op_breakdown(lambda c=c, batch=batch: c.step(batch, autocast()), args.profile, device)
                for c in pair
            }
        ours, theirs = pair
        ratio = statistics.median(t / o for o, t in zip(times[ours.name], times[theirs.name]))
        for contender in pair:
            median = statistics.median(times[contender.name])
            speedup = f"{ratio:.2f}x" if contender is ours else "1.00x"
            mib = "-" if memory[contender.name] is None else f"{memory[contender.name] / 2**20:.0f}"
            rate = contender.flops / median
            system_share = cpu[contender.name].system_share
            print(
                f"{objective:<9} {contender.name:<16} {median * 1e3:>9.1f} {speedup:>9} {mib:>9} "
                f"{contender.flops / 1e9:>11.1f} {rate / 1e9:>8.1f} {rate / peak:>6.1%} {system_share:>5.0%}"
            )
            records.append(
                {
                    "objective": objective,
                    "model": contender.name,
                    "step_ms": median * 1e3,
                    "speedup": ratio if contender is ours else 1.0,
                    "peak_bytes": memory[contender.name],
                    "tokens_per_sec": args.batch_size * args.seq_len / median,
                    "flops_per_step": contender.flops,
                    "flops_per_sec": rate,
                    "util": rate / peak,
                    "system_cpu_share": system_share,
                    "mfu": rate / spec_peak if spec_peak else None,
                    "matrix_product_share": breakdowns[objective][contender.name].matrix_product_share
                    if args.profile
                    else None,
                }
            )
        del pair
        gc.collect()
    for objective, by_model in breakdowns.items():
        print(f"\nwhere a {objective} step's time goes ({args.profile} profiled steps, each operator's own time):")
        for name, breakdown in by_model.items():
            print(name)
            print("\n".join(breakdown.lines()))
    print(
        f"\nload average at the end: {os.getloadavg()[0]:.2f} (other processes compete for the same cores above "
        "about the thread count)"
    )
    if args.json:
        settings = {
            **vars(args),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "matmul_peak_flops": peak,
            "spec_peak_flops": spec_peak,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "load_average_end": os.getloadavg()[0],
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"settings": settings, "rows": records}, handle, indent=2)


if __name__ == "__main__":
    main()
