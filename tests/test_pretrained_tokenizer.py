"""``data.tokenizer: pretrained``: fine-tuning reads the tokenizer its pretrained checkpoint was trained with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiedemb.cli import main, resolve_pretrained_tokenizer
from tiedemb.data.tokenizers import load_tokenizer
from tiedemb.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.end_to_end
def test_the_tokenizer_a_checkpoint_trained_is_found_from_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run's data.cache_dir is relative to where it ran, as a sweep's
    text = tmp_path / "train.txt"
    text.write_text("\n".join(" ".join(f"word{(i * 7 + j) % 97} text" for j in range(50)) for i in range(40)) + "\n")
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs/tied.yaml"),
            "--config",
            str(ROOT / "configs/scale/tiny.yaml"),
            "--model.objective=mlm",
            f"--data.train_files=[{text}]",
            "--data.vocab_size=300",
            "--data.block_size=16",
            "--trainer.max_steps=1",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ]
    )
    checkpoint = next((tmp_path / "runs").rglob("last.ckpt"))
    model, data = {"init_args": {"pretrained": str(checkpoint)}}, {"init_args": {"tokenizer": "pretrained"}}
    resolve_pretrained_tokenizer(model, data)
    found = data["init_args"]["tokenizer"]
    assert "data/cache/tokenizers/wordpiece-300-" in found  # the one the run trained, in its cache
    import torch

    vocab_size = torch.load(checkpoint, weights_only=True)["hyper_parameters"]["vocab_size"]
    assert len(load_tokenizer(found)) == vocab_size  # (a small text fills fewer than 300 tokens)


def test_a_named_tokenizer_is_left_alone_and_a_transformers_folder_is_its_own():
    data = {"init_args": {"tokenizer": "bert-base-uncased"}}
    resolve_pretrained_tokenizer({"init_args": {"pretrained": "x.ckpt"}}, data)
    assert data["init_args"]["tokenizer"] == "bert-base-uncased"
    data = {"init_args": {"tokenizer": "pretrained"}}
    resolve_pretrained_tokenizer({"init_args": {"pretrained": "prajjwal1/bert-tiny"}}, data)
    assert data["init_args"]["tokenizer"] == "prajjwal1/bert-tiny"


def test_pretrained_tokenizer_without_a_pretrained_model_is_one_message():
    with pytest.raises(UserError, match="takes the tokenizer of model.pretrained, which is unset"):
        resolve_pretrained_tokenizer({"init_args": {"pretrained": None}}, {"init_args": {"tokenizer": "pretrained"}})
