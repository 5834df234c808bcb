"""PretrainData end to end: its sources feed the model through the real command line."""

from __future__ import annotations

import csv
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from wandb_records import read_wandb_run

from tiedemb.cli import main
from tiedemb.data import PretrainData
from tiedemb.data.pretrain import DEFAULT_SYNTHETIC_VOCAB

ROOT = Path(__file__).resolve().parents[2]


def test_embedded_corpus_blocks_and_mlm_batches():
    data = PretrainData(vocab_size=300, block_size=16, batch_size=4, synthetic_tokens=16000, synthetic_val_tokens=100)
    data.setup("fit")
    assert len(data.train_set) == 1000 and len(data.val_set) == math.ceil(100 / 16)
    collate = data.train_dataloader().collate_fn
    originals = torch.stack([data.train_set[i]["input_ids"] for i in range(len(data.train_set))])
    batch = collate([data.train_set[i] for i in range(len(data.train_set))])
    picked = batch["labels"] != -100
    assert torch.equal(batch["input_ids"][~picked], originals[~picked])  # untouched where there is no loss
    assert torch.equal(batch["labels"][picked], originals[picked])  # the loss asks for the original token
    assert not torch.isin(originals[picked], torch.tensor(data.special_token_ids)).any()  # [SEP] never masked
    assert picked.float().mean().item() == pytest.approx(
        0.15 * (originals != data.corpus.sep_token_id).float().mean().item(), abs=0.01
    )
    became_mask = (batch["input_ids"] == data.mask_token_id) & picked
    assert became_mask.sum().item() / picked.sum().item() == pytest.approx(0.8, abs=0.03)
    assert data.describe()["data/entropy_rate"] == pytest.approx(data.corpus.entropy_rate)


@pytest.mark.end_to_end
def test_trained_tokenizer_of_300_runs_through_fit(tmp_path, made_up_text):
    text = made_up_text
    cli = main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "tied.yaml"),
            "--config",
            str(ROOT / "configs" / "scale" / "tiny.yaml"),
            "--data.train_files",
            f"[{text}]",
            "--data.tokenizer=null",
            "--data.vocab_size=300",
            f"--data.cache_dir={tmp_path / 'cache'}",
            "--trainer.max_steps=3",
            "--trainer.enable_progress_bar=false",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={tmp_path}",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert cli.datamodule.vocab_size == cli.model.hparams.vocab_size == 300
    rows = list(csv.DictReader(open(next(Path(tmp_path).rglob("metrics.csv")))))
    logged = [float(row["init/log_n"]) for row in rows if row.get("init/log_n")]
    assert logged and logged[0] == pytest.approx(math.log(300))
    measured = [float(row["init/loss"]) for row in rows if row.get("init/loss")]
    assert measured, "init/loss was not logged"


def write_small_text(path: Path, documents: int = 200) -> Path:
    """Seeded sentences over a dozen words: too few distinct pieces for a 600-token tokenizer."""
    rng = random.Random(0)
    words = "the cat dog sat ran on a mat big red small house".split()
    lines = [" ".join(rng.choices(words, k=rng.randint(6, 20))) + " ." for _ in range(documents)]
    path.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("source", ["local_text_bert_tokenizer", "embedded_corpus_vocab_null", "trained_tokenizer_600"])
def test_fit_with_default_loggers_logs_one_vocabulary_size(tmp_path, source, request):
    """The model's vocabulary size comes from the data (a CLI link); the data module used to keep
    the size as typed (null, or a size a given tokenizer overrides), so with a logger on Lightning
    refused to merge the two modules' hyperparameters. A real fit, W&B (offline) and CSV loggers on."""
    configs = ROOT / "configs"
    args = ["--config", str(configs / "tied.yaml"), "--config", str(configs / "scale" / "tiny.yaml")]
    expected = None
    if source == "local_text_bert_tokenizer":
        text = request.getfixturevalue("made_up_text")
        tokenizer = request.getfixturevalue("wordpiece_dir")
        # The README's overlay, with its ../shared/data paths replaced by a text and a tokenizer of the same kinds.
        args += [
            "--config",
            str(configs / "data" / "wikitext2_local.yaml"),
            f"--data.train_files=[{text}]",
            f"--data.tokenizer={tokenizer}",
        ]
    elif source == "embedded_corpus_vocab_null":
        args += ["--data.vocab_size=null"]
        expected = DEFAULT_SYNTHETIC_VOCAB  # the corpus's own default decides
    else:
        text = write_small_text(tmp_path / "small.txt")
        args += [f"--data.train_files=[{text}]", "--data.tokenizer=null", "--data.vocab_size=600"]
    # The loggers write under ./runs: run from tmp_path. WANDB_MODE pins offline even where
    # credentials exist (the CLI picks offline by itself only when there are none).
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "main.py"),
            "fit",
            *args,
            "--trainer.max_steps=2",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "WANDB_MODE": "offline"},
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    (checkpoint_path,) = (tmp_path / "runs").rglob("last.ckpt")
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    model_vocab = checkpoint["state_dict"]["model.embedding.token.weight"].shape[0]  # what the model was built with
    assert checkpoint["hyper_parameters"]["vocab_size"] == model_vocab
    assert checkpoint["datamodule_hyper_parameters"]["vocab_size"] == model_vocab
    if expected is not None:
        assert model_vocab == expected
    if source == "trained_tokenizer_600":
        # The text is too small for 600 tokens: the trained tokenizer (and so the model) is smaller
        # than the size typed, the case where typed and resolved sizes differ.
        assert model_vocab < 600

    (hparams_file,) = (tmp_path / "runs").rglob("hparams.yaml")  # the CSV logger's record
    assert yaml.safe_load(hparams_file.read_text())["vocab_size"] == model_vocab
    wandb_logs = list((tmp_path / "runs").glob("*/wandb/offline-run-*/run-*.wandb"))  # the W&B run's record
    assert len(wandb_logs) == 1, (
        wandb_logs,
        {k: v for k, v in os.environ.items() if k.startswith("WANDB")},
        result.stderr[-3000:],
    )
    (wandb_log,) = wandb_logs
    recorded = read_wandb_run(wandb_log)
    assert recorded.config["vocab_size"] == model_vocab
    run_folder = wandb_log.parents[2]
    assert recorded.name == run_folder.name  # the W&B page names the run as its folder does
