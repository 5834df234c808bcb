"""Throughput through Lightning's ThroughputMonitor with the modules' own FLOP count."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from tiedemb.cli import main
from tiedemb.modules.throughput import MatmulWeights, ModelThroughput, batch_sequences, batch_tokens

ROOT = Path(__file__).resolve().parents[2]


def test_a_batch_counts_its_sequences_and_tokens_padding_included():
    batch = {"input_ids": torch.zeros(3, 7, dtype=torch.long), "attention_mask": torch.zeros(3, 7)}
    assert (batch_sequences(batch), batch_tokens(batch)) == (3, 21)


def test_the_monitor_is_configurable_from_yaml_names():
    monitor = ModelThroughput(peak_flops=5e12, window_size=4)
    assert monitor.peak_flops == 5e12 and monitor.kwargs == {"window_size": 4}


@pytest.mark.end_to_end
def test_glue_fine_tuning_logs_throughput_and_learning_rate(tmp_path, glue_dir, wordpiece_dir):
    """The MRPC config lists its own callbacks; the CLI still adds both monitors."""
    cli = main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "glue" / "mrpc.yaml"),
            f"--data.data_dir={glue_dir}",
            f"--data.tokenizer={wordpiece_dir}",
            "--data.max_train_samples=32",
            "--data.batch_size=4",
            "--model.pretrained=null",
            "--model.hidden_size=32",
            "--model.num_layers=1",
            "--model.num_heads=2",
            "--model.intermediate_size=64",
            "--trainer.max_steps=12",
            "--trainer.val_check_interval=8",
            "--trainer.limit_val_batches=1",
            "--trainer.log_every_n_steps=1",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    monitors = [c for c in cli.trainer.callbacks if isinstance(c, ModelThroughput)]
    assert len(monitors) == 1 and monitors[0].available_flops is None  # a CPU: no MFU
    with open(next(tmp_path.rglob("metrics.csv")), newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    tokens = [float(r["train/device/items_per_sec"]) for r in rows if r.get("train/device/items_per_sec")]
    flops = [float(r["train/device/flops_per_sec"]) for r in rows if r.get("train/device/flops_per_sec")]
    assert tokens and flops and len(tokens) == len(flops)
    # FLOPs per token between a classifier that projects no row and one that projects every row
    weights = MatmulWeights.of(cli.model.model)
    length = 128  # the config's max_length: no batch is longer
    per_token = [f / t for f, t in zip(flops, tokens)]
    assert all(
        6 * weights.per_token <= value <= 6 * (weights.per_token + weights.per_output) + 12 * length * 32
        for value in per_token
    )
    assert any(r.get("lr/pg1") for r in rows)
