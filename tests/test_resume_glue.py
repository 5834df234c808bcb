"""Exact resume of GLUE fine-tuning: stopped by SIGTERM mid-epoch, resumed, the same as an uninterrupted run.

A tiny MRPC-shaped folder (the first rows of the real MRPC files), a tiny model from scratch with
dropout, 6 batches per epoch, a dev evaluation every 3 steps, 2 epochs: 12 steps. The stop is a
SIGTERM during step 5 (mid-epoch, between two evaluations); the run saves its state after step 5 and
exits 143, and ``--ckpt_path=last`` resumes it. The resumed run must start at step 5, end with the
same weights (to 1e-6), log the same dev metrics and ``val/epochs_to_converge``, and its CSV metrics
must continue the stopped run's: every step's training loss, learning rates and dev metrics once, none
missing. (The throughput monitor's running totals and timings count per process, and the parameter
counts are logged again when the resumed run starts: those are not compared step by step.)
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from reliability_helpers import FirstStep

from tiedemb.cli import main

ROOT = Path(__file__).resolve().parents[1]


def computed(name: str) -> bool:
    """What the training computes: the loss, the learning rates, the dev metrics (not throughput or sizes)."""
    return name == "train/loss" or name.startswith(("lr/", "val/"))


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def mrpc_folder(tmp_path_factory, glue_dir: Path) -> Path:
    """48 training and 32 dev pairs of a classic MRPC folder, as a glue_data folder."""
    folder = tmp_path_factory.mktemp("glue") / "glue"
    (folder / "MRPC").mkdir(parents=True)
    for split, rows in (("train.tsv", 48), ("dev.tsv", 32)):
        lines = (glue_dir / "MRPC" / split).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / "MRPC" / split).write_text("".join(lines[: rows + 1]), encoding="utf-8")
    return folder


def fit_args(root: Path, glue: Path, tokenizer: Path, *extra: str) -> list[str]:
    return [
        "fit",
        "--config",
        str(ROOT / "configs" / "glue" / "mrpc.yaml"),
        f"--data.data_dir={glue}",
        f"--data.tokenizer={tokenizer}",
        "--data.batch_size=8",
        "--data.eval_batch_size=16",
        "--data.max_length=64",
        "--model.pretrained=null",
        "--model.hidden_size=32",
        "--model.num_layers=2",
        "--model.num_heads=2",
        "--model.intermediate_size=64",
        "--model.learning_rate=1e-3",
        "--trainer.max_epochs=2",
        "--trainer.val_check_interval=0.5",
        "--trainer.log_every_n_steps=1",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={root}",
        f"--trainer.default_root_dir={root}",
        "--trainer.callbacks+=reliability_helpers.FirstStep",
        *extra,
    ]


def metric_rows(root: Path) -> list[tuple[str, int, float]]:
    """(metric, step, value) of every computed value in the run folders' metrics.csv files, oldest run first."""
    found = []
    versions = [path.parent for path in root.rglob("version_*/metrics.csv")]  # in the run's own folder
    for version in sorted(versions, key=lambda path: int(path.name.split("_")[1])):
        with open(version / "metrics.csv", newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                step = int(row["step"])
                found += [(name, step, float(value)) for name, value in row.items() if computed(name) and value != ""]
    return found


@pytest.mark.end_to_end
def test_glue_fine_tuning_stopped_mid_epoch_resumes_exactly(tmp_path, mrpc_folder, wordpiece_dir):
    straight = main(fit_args(tmp_path / "straight", mrpc_folder, wordpiece_dir))
    assert straight.trainer.global_step == 12 and straight.trainer.num_training_batches == 6

    root = tmp_path / "stopped"
    sigterm_in_step_5 = "--trainer.callbacks+=" + json.dumps(
        {"class_path": "reliability_helpers.StopAt", "init_args": {"step": 4, "sigterm": True}}
    )
    with pytest.raises(SystemExit) as stopped:
        main(fit_args(root, mrpc_folder, wordpiece_dir, sigterm_in_step_5))
    assert stopped.value.code == 143
    resumed = main(fit_args(root, mrpc_folder, wordpiece_dir, "--ckpt_path=last"))
    assert next(cb.first_step for cb in resumed.trainer.callbacks if isinstance(cb, FirstStep)) == 5
    assert resumed.trainer.global_step == 12

    expected, actual = straight.model.state_dict(), resumed.model.state_dict()
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=1e-6, msg=name)
    assert resumed.model.epochs_to_converge == straight.model.epochs_to_converge is not None

    # The CSV metrics of the two parts together are the uninterrupted run's: no step twice, none missing.
    reference = {(name, step): value for name, step, value in metric_rows(tmp_path / "straight")}
    parts = metric_rows(root)
    keys = [(name, step) for name, step, _ in parts]
    assert len(keys) == len(set(keys)), sorted(key for key in keys if keys.count(key) > 1)[:5]
    assert set(keys) == set(reference), sorted(set(keys) ^ set(reference))[:5]
    for name, step, value in parts:
        assert math.isclose(value, reference[name, step], rel_tol=0, abs_tol=1e-6), (name, step, value)
    assert {name for name, _ in reference} == {
        "train/loss",
        "lr/pg1",
        "lr/pg2",
        "val/accuracy",
        "val/f1",
        "val/loss",
        "val/epochs_to_converge",
    }
    assert len({step for name, step in reference if name == "train/loss"}) == 12
    assert len({step for name, step in reference if name == "val/accuracy"}) == 4  # every 3 of 12 steps
