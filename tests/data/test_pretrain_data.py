"""PretrainData end to end: its sources feed the model through the real command line."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch

from tiedemb.cli import main
from tiedemb.data import PretrainData

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
    assert picked.float().mean().item() == pytest.approx(0.15 * (originals != data.corpus.sep_token_id).float().mean().item(), abs=0.01)
    became_mask = (batch["input_ids"] == data.mask_token_id) & picked
    assert became_mask.sum().item() / picked.sum().item() == pytest.approx(0.8, abs=0.03)
    assert data.describe()["data/entropy_rate"] == pytest.approx(data.corpus.entropy_rate)


@pytest.mark.end_to_end
def test_trained_tokenizer_of_8000_runs_through_fit(tmp_path, shared_data):
    text = shared_data / "text" / "wikitext-2-valid.txt"
    cli = main([
        "fit", "--config", str(ROOT / "configs" / "tied.yaml"), "--config", str(ROOT / "configs" / "scale" / "tiny.yaml"),
        "--data.train_files", f"[{text}]", "--data.tokenizer=null", "--data.vocab_size=8000",
        f"--data.cache_dir={tmp_path / 'cache'}", "--trainer.max_steps=3", "--trainer.enable_progress_bar=false",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={tmp_path}",
        f"--trainer.default_root_dir={tmp_path}",
    ])
    assert cli.datamodule.vocab_size == cli.model.hparams.vocab_size == 8000
    rows = list(csv.DictReader(open(next(Path(tmp_path).rglob("metrics.csv")))))
    logged = [float(row["init/log_n"]) for row in rows if row.get("init/log_n")]
    assert logged and logged[0] == pytest.approx(math.log(8000))
    measured = [float(row["init/loss"]) for row in rows if row.get("init/loss")]
    assert measured, "init/loss was not logged"
