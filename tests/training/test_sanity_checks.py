"""Odd inputs said in one line: a tokenizer too small for real text, and a single training file given
without a list."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from tiedemb.training.run_checks import small_vocabulary

WORDS = "the a cat dog man woman sat ran saw big small red on under near house park and with .".split()


def test_a_tokenizer_of_few_tokens_is_named_in_one_warning(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    line = small_vocabulary(SimpleNamespace(tokenizer=tokenizer))
    assert line is not None and "\n" not in line
    assert line.startswith(f"warning: the tokenizer {str(tiny_tokenizer_dir)!r} has {len(tokenizer)} tokens;")
    assert small_vocabulary(SimpleNamespace(tokenizer=None)) is None  # the embedded corpus
    assert small_vocabulary(SimpleNamespace(tokenizer=list(range(300)))) is None


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
