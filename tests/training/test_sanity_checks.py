"""Odd inputs said in one line: a single training file given without a list."""

from __future__ import annotations

import random

import pytest

WORDS = "the a cat dog man woman sat ran saw big small red on under near house park and with .".split()


@pytest.mark.end_to_end
def test_one_training_file_is_given_without_a_list(tmp_path, monkeypatch):
    from tiedemb.data.pretrain import PretrainData

    rng = random.Random(0)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(200)))
    monkeypatch.chdir(tmp_path)
    data = PretrainData(train_files=str(text), vocab_size=300, block_size=16, batch_size=4, objective="clm")
    assert data.hparams.train_files == [str(text)]
    assert data.source == "files" and len(data.tokenizer) == data.vocab_size
