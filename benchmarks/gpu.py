"""Every GPU-only measurement of tiedemb in one command, ending in one summary table.

    bash benchmarks/gpu.sh                    # on a machine with a CUDA GPU (one H100/H200 in mind)
    bash benchmarks/gpu.sh --dry-run-on-cpu   # the same steps at tiny size on the CPU, to check the script

Steps, run one after another (each in its own process, its output kept in ``<out>/<step>.log``):

1. ``train_step``: ``benchmarks/train_step.py --size base --device cuda --dtype bf16 --batch-size 256``,
   BERT-base MLM and CLM steps of tiedemb against transformers (step time, tokens/s, MFU against the
   GPU's dense bf16 spec peak, utilisation against a measured 8192^2 bf16 matrix product, peak memory),
   then 3 profiled steps of each (``--profile 3``): the share of matrix products in the table's note,
   the operators that take the most time in ``train_step.log``.
2. ``fit tied_orth+base``: ``main.py fit --config configs/tied_orth.yaml --config configs/scale/base.yaml``
   (the tied study at BERT-base size: CLM, pre-norm, RoPE, batch 256 x 128, vocabulary 30522).
3. ``fit width bert_base``: ``main.py fit --config configs/width/bert_base.yaml`` on the embedded
   synthetic corpus instead of its hub dataset (``--data.dataset=null --data.dataset_config=null
   --data.num_proc=null --data.tokenizer=null --data.vocab_size=30522``; the GPU machine has no
   network): BERT's MLM, post-norm, d_e = 768.
4. ``pytest -m gpu``: ``python -m pytest -m gpu -q`` (FSDP, DeepSpeed and DDP end to end,
   tests/test_scale_gpu.py).

Both fits run ``--trainer.precision=bf16-mixed --trainer.max_steps=200`` on one device with the
study's model and batch, and differ from a study run only where a benchmark must: a CSV logger
into ``<out>``, no checkpoints, one short validation (2 batches) after the last step instead of the
config's schedule, and a synthetic corpus of exactly one epoch for the steps (``--data.synthetic_tokens``:
the width config's default 2M tokens are only 61 batches of 256 x 128, and an epoch boundary or a
validation inside the timed steps would disturb the timing). Their figures come from the run's own
CSV: the probe callback ``benchmarks/fit_probe.py`` adds sustained tokens/s, FLOP/s, MFU and
utilisation over the steps after the first 10% (timed between device synchronisations) and
``torch.cuda.max_memory_allocated`` (the module logs no memory figure), and the module's own per-step
``train/device/items_per_sec`` (tokens/s) and ``train/device/mfu`` samples (every ``log_every_n_steps``) are
shown beside them as a cross-check. MFU divides by the spec-sheet dense bf16 peak (989 TFLOP/s for H100 SXM and
H200), utilisation by the matrix-product peak ``train_step`` measured at the start in the same dtype:
"how close to what this chip really does".

Expected duration on one H100/H200: about 4 to 6 minutes, inside the 8-minute budget. Estimated, not
measured (no GPU was available when this was written), from the pieces' CPU times measured on the
development machine and FLOP counts:

* ``train_step``: ~10 s of imports and CUDA start-up, ~10 s building four BERT-base-size models on
  the CPU, then 4 x 14 steps of at most 22 TFLOP (BertForMaskedLM projects all 32768 positions onto
  the vocabulary: 6 x 110M weights per token) at 250-450 TFLOP/s, 50-100 ms each: 30-45 s in all.
* each fit: ~10 s of imports, ~7 s of CPU for the synthetic corpus (the 30522-word Markov chain takes
  5.4 s of CPU to build, 6.6M tokens 1.4 s), a few seconds of CUDA and model set-up, then 200 steps
  of ~22 TFLOP (tied_orth, CLM: every position projected) or ~17 TFLOP (width, MLM: 15% projected)
  at ~40% MFU, about 55 and 45 ms a step, 10-12 s: 35-45 s each.
* ``pytest -m gpu``: ~10 s to collect, then up to eight tiny ``main.py fit`` subprocesses (FSDP x 3, a
  refused FSDP policy, DeepSpeed x 3 when DeepSpeed is installed, DDP; the two-GPU test skips on one
  GPU), each ~15-20 s of process start, imports, CUDA and strategy set-up: 2-3 minutes.

Each step has its own time limit (``--timeout``; 240 s, pytest 420 s) so that one stuck step cannot
take the others' time; the total wall time is printed under the table.

``--dry-run-on-cpu`` runs the same four steps on the CPU (CUDA hidden from every child process):
``train_step.py --size small --device cpu --steps 2 --warmup 1`` (batch 4 x 32, one thread), both fits
with ``--config configs/scale/tiny.yaml`` appended and 4 steps, and ``pytest -m gpu``, which then
reports every test skipped ("skipped: no CUDA" in the table). Peak memory on CPU is the peak
resident set size of the process for the fits (coarse), live tensor bytes for ``train_step``.

Options: ``--out DIR`` keeps the logs and CSVs there (default: a new folder under the system temp
folder, printed), ``--json FILE`` writes the table's records, ``--steps N`` changes the fits' step
count, ``--skip STEP`` leaves a step out (repeatable; ``train_step``, ``fit_tied``, ``fit_width``,
``pytest``). Exit status: 0 when every step that ran succeeded (skipped tests are not failures).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
CONFIGS = ROOT / "configs"
STEP_NAMES = ("train_step", "fit_tied", "fit_width", "pytest")


@dataclass
class Row:
    """One line of the summary table."""

    step: str
    result: str  # "ok", "FAILED (rc 1)", "skipped: no CUDA", "6 passed, 2 skipped" ...
    seconds: float | None = None  # wall time of the whole step (its process)
    cpu_seconds: float | None = None  # CPU time of its processes: what a quiet machine's wall time tracks
    tokens_per_sec: float | None = None
    mfu: float | None = None  # against the device's spec-sheet dense 16-bit peak
    util: float | None = None  # against the measured matrix-product peak
    peak_mib: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fit:
    """One ``main.py fit`` of a study config."""

    name: str
    label: str
    configs: list[str]
    args: list[str]  # always
    gpu_args: list[str]  # only on the GPU (the dry run keeps tiny.yaml's vocabulary)
    dry_args: list[str] = field(default_factory=list)  # only in the dry run


FITS = (
    Fit("fit_tied", "fit tied_orth+base", ["tied_orth.yaml", "scale/base.yaml"], [], []),
    Fit(
        "fit_width",
        "fit width bert_base",
        ["width/bert_base.yaml"],
        # The config names a hub dataset (its subset, tokenising processes) and tokenizer; none
        # given, PretrainData uses its embedded Markov corpus, on the GPU at BERT's vocabulary size.
        ["--data.dataset=null", "--data.dataset_config=null", "--data.num_proc=null", "--data.tokenizer=null"],
        ["--data.vocab_size=30522"],
        # tiny.yaml narrows the hidden size below the config's d_e = 768: d_e follows it.
        ["--model.embedding_dim=null"],
    ),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dry-run-on-cpu",
        action="store_true",
        help="every step at tiny size on the CPU, with CUDA hidden: checks the script itself",
    )
    parser.add_argument("--out", help="folder for logs, CSVs and JSON (default: a new temporary folder)")
    parser.add_argument("--json", metavar="FILE", help="write the summary's records here as well")
    parser.add_argument("--steps", type=int, help="training steps of each fit (default 200; dry run 4)")
    parser.add_argument("--skip", action="append", default=[], choices=STEP_NAMES, help="leave a step out")
    parser.add_argument(
        "--timeout", type=float, help="seconds each step may take (default 240, pytest 420; dry run 900)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dry = args.dry_run_on_cpu
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tiedemb-gpu-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    steps = args.steps or (4 if dry else 200)
    env = child_environment(dry)
    started = time.perf_counter()
    print(f"{'dry run on the CPU' if dry else 'GPU run'}; logs and metrics in {out}", flush=True)

    rows: list[Row] = []
    matmul_peak: float | None = None
    if "train_step" not in args.skip:
        step_rows, matmul_peak = run_train_step(out, env, dry, timeout(args, "train_step"))
        rows += step_rows
    for fit in FITS:
        if fit.name not in args.skip:
            rows.append(run_fit(fit, out, env, dry, steps, matmul_peak, timeout(args, fit.name)))
    if "pytest" not in args.skip:
        rows.append(run_pytest(out, env, timeout(args, "pytest")))

    total = time.perf_counter() - started
    print()
    print(format_table(rows))
    print(
        f"\ntotal wall time {total:.0f} s; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
        f"logs in {out}"
    )
    records = {
        "dry_run_on_cpu": dry,
        "steps": steps,
        "total_seconds": total,
        "out": str(out),
        "rows": [vars(row) for row in rows],
    }
    (out / "summary.json").write_text(json.dumps(records, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    return 1 if any(row.result.startswith("FAILED") for row in rows) else 0


def timeout(args: argparse.Namespace, step: str) -> float:
    if args.timeout:
        return args.timeout
    if args.dry_run_on_cpu:
        return 900.0  # a loaded 2-core machine can be ten times slower than a quiet one
    return 420.0 if step == "pytest" else 240.0


def child_environment(dry: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["WANDB_MODE"] = "disabled"
    # This checkout's tiedemb (not another one an environment may have installed), and
    # fit_probe.FitProbe, imported by class path from the benchmarks folder.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(BENCHMARKS), env.get("PYTHONPATH")]))
    if dry:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the dry run must behave the same on a machine with a GPU
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # one thread, no spinning against other load
    return env


@dataclass
class Ran:
    code: int  # -1: timed out
    seconds: float
    cpu_seconds: float  # user + system time of the step's processes
    log: str


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(name: str, command: list[str], out: Path, env: dict[str, str], limit: float) -> Ran:
    """Run one step, its output into ``<out>/<name>.log``."""
    log = out / f"{name}.log"
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", flush=True)
    started, cpu = time.perf_counter(), children_cpu()
    with log.open("w", encoding="utf-8") as handle:
        # A session of its own, so that a step over its limit is stopped with everything it started
        # (pytest's tests start main.py processes of their own).
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = -1
    seconds, cpu = time.perf_counter() - started, children_cpu() - cpu
    print(
        f"[{time.strftime('%H:%M:%S')}] {name}: {'timed out' if code == -1 else f'exit {code}'} "
        f"after {seconds:.0f} s ({cpu:.0f} s CPU)",
        flush=True,
    )
    return Ran(code, seconds, cpu, log.read_text(encoding="utf-8", errors="replace"))


def failed(code: int) -> str:
    return "FAILED (timed out)" if code == -1 else f"FAILED (rc {code})"


def last_line(log: str) -> str:
    """The last non-empty line of a log: usually the error, for the table's notes."""
    return next((line.strip() for line in reversed(log.splitlines()) if line.strip()), "")[:160]


# -- 1. train_step.py ------------------------------------------------------------------------------
def run_train_step(out: Path, env: dict[str, str], dry: bool, limit: float) -> tuple[list[Row], float | None]:
    result = out / "train_step.json"
    if dry:
        sizes = [
            "--size",
            "small",
            "--device",
            "cpu",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--batch-size",
            "4",
            "--seq-len",
            "32",
            "--threads",
            "1",
        ]
    else:
        sizes = ["--size", "base", "--device", "cuda", "--dtype", "bf16", "--batch-size", "256"]
    command = [sys.executable, str(BENCHMARKS / "train_step.py"), *sizes, "--profile", "3", "--json", str(result)]
    ran = run("train_step", command, out, env, limit)
    if ran.code != 0 or not result.is_file():
        return [Row("train_step", failed(ran.code), ran.seconds, ran.cpu_seconds, note=last_line(ran.log))], None
    report = json.loads(result.read_text())
    settings = report["settings"]
    rows = []
    for index, record in enumerate(report["rows"]):
        peak = record["peak_bytes"]
        # The process's times belong to all its rows: shown once.
        seconds, cpu = (ran.seconds, ran.cpu_seconds) if index == 0 else (None, None)
        rows.append(
            Row(
                f"train_step {record['objective']} {record['model']}",
                "ok",
                seconds,
                cpu,
                record["tokens_per_sec"],
                record["mfu"],
                record["util"],
                None if peak is None else peak / 2**20,
                f"{record['step_ms']:.1f} ms/step, {record['speedup']:.2f}x, "
                f"matrix products {record['matrix_product_share']:.0%} of the step",
                extra=record,
            )
        )
    rows[0].note += (
        f"; {settings['device_name']}, {settings['dtype']}, batch {settings['batch_size']} x "
        f"{settings['seq_len']}, matmul peak {settings['matmul_peak_flops'] / 1e12:.3g} TFLOP/s"
    )
    return rows, settings["matmul_peak_flops"]


# -- 2, 3. main.py fit ---------------------------------------------------------------------------------
def data_settings(config_files: list[Path]) -> dict[str, Any]:
    """``data.init_args`` as the overlays leave it (later files win), for the corpus length."""
    merged: dict[str, Any] = {}
    for path in config_files:
        loaded = yaml.safe_load(path.read_text()) or {}
        merged.update(((loaded.get("data") or {}).get("init_args")) or {})
    return merged


def fit_command(fit: Fit, folder: Path, dry: bool, steps: int, matmul_peak: float | None) -> list[str]:
    configs = [CONFIGS / name for name in fit.configs] + ([CONFIGS / "scale" / "tiny.yaml"] if dry else [])
    data = data_settings(configs)
    # Enough blocks for every step (and the epoch must hold the validation interval).
    tokens = (steps + 2) * int(data.get("batch_size", 32)) * int(data.get("block_size", 128))
    probe = {
        "class_path": "fit_probe.FitProbe",
        "init_args": {"warmup_steps": max(1, steps // 10), "peak_flops": matmul_peak},
    }
    # The module's own throughput log (train/device/*), averaged over at most its usual 10 batches:
    # a short dry run must still fill the window once.
    throughput = {
        "class_path": "tiedemb.modules.throughput.ModelThroughput",
        "init_args": {"window_size": max(2, min(10, steps))},
    }
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(folder), "name": "csv", "version": "run"},
    }
    command = [sys.executable, str(ROOT / "main.py"), "fit"]
    for config in configs:
        command += ["--config", str(config)]
    command += [
        *fit.args,
        *(fit.dry_args if dry else fit.gpu_args),
        f"--data.synthetic_tokens={tokens}",
        "--trainer.precision=bf16-mixed",
        f"--trainer.max_steps={steps}",
        f"--trainer.accelerator={'cpu' if dry else 'gpu'}",
        "--trainer.devices=1",
        f"--trainer.val_check_interval={steps}",  # one validation, after the last step
        "--trainer.limit_val_batches=2",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={folder}",
        f"--trainer.logger={json.dumps(logger)}",
        f"--trainer.callbacks={json.dumps([probe, throughput])}",
    ]
    return command


def read_metrics(path: Path) -> dict[str, list[float]]:
    """Every logged value of every metric in a CSVLogger's ``metrics.csv``, in step order."""
    values: dict[str, list[float]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for line in csv.DictReader(handle):
            for key, value in line.items():
                if key and value not in (None, ""):
                    try:
                        values.setdefault(key, []).append(float(value))
                    except ValueError:
                        pass
    return values


def run_fit(
    fit: Fit, out: Path, env: dict[str, str], dry: bool, steps: int, matmul_peak: float | None, limit: float
) -> Row:
    folder = out / fit.name
    ran = run(fit.name, fit_command(fit, folder, dry, steps, matmul_peak), out, env, limit)
    metrics_file = folder / "csv" / "run" / "metrics.csv"
    if ran.code != 0 or not metrics_file.is_file():
        return Row(fit.label, failed(ran.code), ran.seconds, ran.cpu_seconds, note=last_line(ran.log))
    metrics = read_metrics(metrics_file)
    last = lambda key: metrics[key][-1] if metrics.get(key) else None  # noqa: E731
    logged_rate, logged_mfu = metrics.get("train/device/items_per_sec", []), metrics.get("train/device/mfu", [])
    note = f"{int(last('bench/timed_steps') or 0)} timed steps"
    if logged_rate:
        note += f"; module-logged median {statistics.median(logged_rate):,.0f} tok/s"
        if logged_mfu:
            note += f", MFU {statistics.median(logged_mfu):.1%}"
        note += f" ({len(logged_rate)} samples)"
    peak = last("bench/peak_memory_bytes")
    if peak is not None and last("bench/peak_memory_kind") == 0.0:
        note += "; memory = peak RSS"
    if last("val/loss") is not None:
        note += f"; val/loss {last('val/loss'):.3f}"
    if last("bench/tokens_per_sec") is None:
        return Row(fit.label, "FAILED (no timed steps)", ran.seconds, ran.cpu_seconds, note=note)
    return Row(
        fit.label,
        "ok",
        ran.seconds,
        ran.cpu_seconds,
        last("bench/tokens_per_sec"),
        last("bench/mfu"),
        last("bench/util"),
        None if peak is None else peak / 2**20,
        note,
        extra={k: v[-1] for k, v in metrics.items()},
    )


# -- 4. pytest -m gpu ----------------------------------------------------------------------------------
def run_pytest(out: Path, env: dict[str, str], limit: float) -> Row:
    report = out / "pytest.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    ran = run("pytest", command, out, env, limit)
    if not report.is_file():
        return Row("pytest -m gpu", failed(ran.code), ran.seconds, ran.cpu_seconds, note=last_line(ran.log))
    suites = ElementTree.parse(report).getroot()
    suites = [suites] if suites.tag == "testsuite" else list(suites.iter("testsuite"))
    count = lambda name: sum(int(suite.get(name, 0)) for suite in suites)  # noqa: E731
    total, skipped, failures, errors = count("tests"), count("skipped"), count("failures"), count("errors")
    passed = total - skipped - failures - errors
    reasons = sorted(
        {
            (element.get("message") or "").removeprefix("Skipped: ")
            for element in ElementTree.parse(report).getroot().iter("skipped")
        }
    )
    counts = f"{passed} passed, {skipped} skipped, {failures + errors} failed"
    if failures or errors or ran.code not in (0, 5):
        result = f"FAILED ({failures + errors} failed)" if failures or errors else failed(ran.code)
    elif total and skipped == total and any("CUDA" in reason for reason in reasons):
        result = "skipped: no CUDA"
    else:
        result = "ok"
    note = counts + (f"; skip reasons: {'; '.join(reasons)}" if reasons else "")
    return Row(
        "pytest -m gpu",
        result,
        ran.seconds,
        ran.cpu_seconds,
        note=note,
        extra={"passed": passed, "skipped": skipped, "failed": failures + errors},
    )


# -- the table -----------------------------------------------------------------------------------------
def format_table(rows: list[Row]) -> str:
    def number(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    header = (
        f"{'step':<32} {'result':<18} {'wall s':>7} {'CPU s':>6} {'tokens/s':>12} {'MFU':>6} {'util':>6} "
        f"{'peak MiB':>9}  notes"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.step:<32} {row.result:<18} {number(row.seconds, '.0f'):>7} {number(row.cpu_seconds, '.0f'):>6} "
            f"{number(row.tokens_per_sec, ',.0f'):>12} "
            f"{number(row.mfu, '.1%'):>6} {number(row.util, '.1%'):>6} {number(row.peak_mib, ',.0f'):>9}  {row.note}"
        )
    lines.append("")
    lines.append(
        "tokens/s: batch x length over the step time (fits: sustained over the steps after warm-up). "
        "MFU: model FLOPs/s over the device's spec-sheet dense 16-bit peak (known GPUs only). util: over "
        "the matrix-product peak train_step measured. CPU s: user + system time of the step's processes."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
