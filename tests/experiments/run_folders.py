"""Hand-made run folders, laid out as a sweep leaves them, for report and aggregation tests."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from tiedemb.experiments import layout


def make_cell(
    root: Path,
    study: str,
    labels: dict[str, str],
    metrics: dict[str, dict[int, float]],
    hparams: dict | None = None,
    state: str = "finished",
    message: str = "",
    version: int = 0,
) -> Path:
    """A cell folder with cell.json, status.json and one CSV logger version holding ``metrics``."""
    folder = root / study / ",".join(f"{k}={v}" for k, v in labels.items())
    layout.write_json(
        folder / layout.CELL_FILE,
        {"id": f"{study}/{folder.name}", "study": study, "labels": labels, "spec_hash": "test", "workdir": str(root)},
    )
    layout.write_json(folder / layout.STATUS_FILE, {"state": state, "attempt": 1, "message": message})
    write_metrics(folder / "csv" / f"version_{version}", metrics, hparams or {})
    return folder


def write_metrics(version: Path, metrics: dict[str, dict[int, float]], hparams: dict) -> None:
    """Lightning CSVLogger's layout: one row per (step, group of metrics), blanks elsewhere."""
    version.mkdir(parents=True, exist_ok=True)
    names = sorted(metrics)
    with open(version / "metrics.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", *names, "step"])
        for name in names:
            for step, value in sorted(metrics[name].items()):
                writer.writerow(["0", *[value if other == name else "" for other in names], step])
    (version / "hparams.yaml").write_text(yaml.safe_dump(hparams), encoding="utf-8")


def pretrain_metrics(initial: float, predicted: float, val: dict[int, float], params: float = 1000.0) -> dict:
    return {
        "init/loss": {0: initial},
        "init/loss_pred": {0: predicted},
        "init/log_n": {0: 6.0},
        "val/loss": val,
        "params/total": {0: params},
        "params/embedding": {0: params / 4},
    }


def glue_metrics(
    accuracy: dict[int, float], f1: dict[int, float], epochs: float, total: float, embedding: float
) -> dict:
    return {
        "val/accuracy": accuracy,
        "val/f1": f1,
        "val/loss": dict.fromkeys(accuracy, 0.5),
        "val/epochs_to_converge": {max(accuracy) + 1: epochs},
        "params/total": {0: total},
        "params/embedding": {0: embedding},
    }
