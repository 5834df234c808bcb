"""Odd inputs said in one line: a run the report cannot analyse, and a single training file given without a list."""

from __future__ import annotations

import random

import pytest
import torch

from tiedemb.errors import UserError
from tiedemb.experiments.analysis import analyse

WORDS = "the a cat dog man woman sat ran saw big small red on under near house park and with .".split()


def test_a_vocabulary_of_special_tokens_only_is_a_user_error_the_report_notes():
    with pytest.raises(UserError, match="holds 0 token\\(s\\) besides the special ones"):
        analyse(torch.randn(5, 8), excluded_ids=range(5))
    assert analyse(torch.randn(7, 8), excluded_ids=range(5)).vocab_size == 7


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
