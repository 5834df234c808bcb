"""prepare_text: sources, exact block accounting, the on-disk cache and user mistakes."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
from stand_in_data import TEXT_TITLE
from text_helpers import prepare, sentences

from tiedemb.data import text
from tiedemb.data import tokenizers as tk
from tiedemb.errors import UserError
from tiedemb.training import hub


def count_tokens(tokenizer_dir: str, documents: list[str]) -> int:
    """The tokenizer's own count, plus one separator per document."""
    tokenizer = tk.load_tokenizer(tokenizer_dir)
    return sum(len(tokenizer(d, add_special_tokens=False).input_ids) + 1 for d in documents)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class MapCounter:
    """Wraps the tokenising step to count how often it runs."""

    def __init__(self, monkeypatch):
        self.calls = 0
        self._real = text._tokenize_documents
        monkeypatch.setattr(text, "_tokenize_documents", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._real(*args, **kwargs)


# --------------------------------------------------------------------------- a WikiText-shaped file


@pytest.mark.end_to_end
def test_wikitext_blocks_hold_every_token_and_the_cache_skips_tokenising(
    tmp_path, monkeypatch, caplog, made_up_text, wordpiece_dir
):
    with made_up_text.open(encoding="utf-8-sig") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    tokenizer = tk.load_tokenizer(wordpiece_dir)
    per_line = [tokenizer(line, add_special_tokens=False).input_ids for line in lines]
    expected = sum(map(len, per_line)) + len(lines)  # one [SEP] after each document
    arguments = dict(
        tokenizer=str(wordpiece_dir),
        train_files=[str(made_up_text)],
        val_files=[str(made_up_text)],
        block_size=128,
        val_fraction=0.0,
        cache_dir=str(tmp_path / "cache"),
    )
    counter = MapCounter(monkeypatch)

    with caplog.at_level(logging.INFO, logger="tiedemb.data"):
        first = prepare(**arguments)
    stats = first.stats
    assert lines[0] == TEXT_TITLE and "\ufeff" not in lines[0]
    assert stats["train_tokens"] == expected and stats["train_documents"] == len(lines)
    assert 0 <= stats["train_discarded_tokens"] < 128
    assert stats["train_blocks"] * 128 == expected - stats["train_discarded_tokens"] == len(first.train) * 128
    assert stats["discarded_tokens"] == stats["train_discarded_tokens"] + stats["val_discarded_tokens"]
    assert stats["separator_tokens"] == stats["documents"] == 2 * len(lines)
    assert f"{expected} tokens" in caplog.text and "discarded" in caplog.text

    blocks = first.train.with_format("numpy")[:]["input_ids"]
    assert blocks.shape == (stats["train_blocks"], 128)
    separator = tokenizer.convert_tokens_to_ids("[SEP]")
    stream = np.concatenate([np.append(ids, separator) for ids in per_line])
    np.testing.assert_array_equal(blocks.reshape(-1), stream[: blocks.size])  # order kept, [SEP] between documents
    assert first.tokenizer.pad_token_id == tokenizer.convert_tokens_to_ids("[PAD]")
    assert first.tokenizer.mask_token_id == tokenizer.convert_tokens_to_ids("[MASK]")
    assert counter.calls == 2  # train and val

    second = prepare(**arguments)
    assert counter.calls == 2, "the cached run tokenised again"
    assert second.stats == stats
    assert all(str(tmp_path / "cache") in f["filename"] for f in second.train.cache_files)
    np.testing.assert_array_equal(second.train.with_format("numpy")[:]["input_ids"], blocks)


def test_trained_tokenizer_is_saved_beside_the_data_and_reused(tmp_path, monkeypatch, made_up_text):
    cache = tmp_path / "cache"
    # every document trains (the first block opens the text); the same file validates
    arguments = dict(
        objective="clm",
        vocab_size=400,
        train_files=[str(made_up_text)],
        block_size=64,
        val_files=[str(made_up_text)],
        val_fraction=0.0,
        cache_dir=str(cache),
    )
    first = prepare(**arguments)
    assert len(first.tokenizer) == 400 and first.tokenizer.eos_token == "</s>"
    (saved,) = (cache / "tokenizers").iterdir()
    assert saved.name.startswith("bpe-400-")
    # A different block size re-blocks the text but trains no new tokenizer.
    monkeypatch.setattr(tk, "_train_and_save", lambda *_: pytest.fail("retrained"))
    second = prepare(**arguments | {"block_size": 32})
    assert second.tokenizer.get_vocab() == first.tokenizer.get_vocab()
    assert second.stats["train_tokens"] == first.stats["train_tokens"]
    assert second.tokenizer.decode(second.train[0]["input_ids"]).startswith(f"{TEXT_TITLE}</s>")


def test_the_trained_tokenizer_is_found_again_after_the_text_is_touched_and_for_any_data_order_seed(
    tmp_path, monkeypatch, made_up_text
):
    """A run's tokenizer is the one trained on its documents: found for a run whose data order seed is
    not its split seed, and after its text file was copied again (same bytes, new modification time)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(made_up_text.read_bytes())
    settings = dict(
        objective="mlm", vocab_size=300, train_files=[str(corpus)], val_fraction=0.1, cache_dir=str(tmp_path / "cache")
    )
    trained = prepare(**settings, block_size=64, seed=0).tokenizer
    (saved,) = (tmp_path / "cache" / "tokenizers").iterdir()
    recorded = {**settings, "seed": 2, "corpus_seed": 0}  # what a checkpoint records of its data
    assert tk.tokenizer_of_run(recorded, len(trained), "mlm") == str(saved)
    os.utime(corpus, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # synced again: same bytes
    monkeypatch.setattr(tk, "_train_and_save", lambda *_: pytest.fail("trained again"))
    assert prepare(**settings, block_size=64, seed=0).tokenizer.get_vocab() == trained.get_vocab()
    assert tk.tokenizer_of_run(recorded, len(trained), "mlm") == str(saved)


# --------------------------------------------------------------------------- sources


def test_txt_strips_bom_and_skips_blank_lines(tmp_path, small_tokenizer):
    docs = sentences(40)
    raw = "\ufeff" + "\n\n".join(f" {d} " for d in docs) + "\n   \n"
    (tmp_path / "a.txt").write_text(raw, encoding="utf-8")
    prepared = prepare(tokenizer=small_tokenizer, train_files=[str(tmp_path / "a.txt")], cache_dir=str(tmp_path / "c"))
    assert prepared.stats["documents"] == 40
    assert prepared.stats["train_tokens"] + prepared.stats["val_tokens"] == count_tokens(small_tokenizer, docs)


def test_json_lines_and_parquet_are_read_as_a_local_dataset_folder_with_its_text_column(tmp_path, small_tokenizer):
    docs = sentences(50)
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        "".join(json.dumps({"id": i, "body": d}) + "\n" for i, d in enumerate(docs[:40]))
    )
    (folder / "validation.jsonl").write_text(
        "".join(json.dumps({"id": 0, "body": d}) + "\n" for d in docs[40:] + ["  "])
    )
    arguments = dict(
        tokenizer=small_tokenizer,
        dataset=str(folder),
        text_column="body",
        val_fraction=text.VAL_FRACTION,
        cache_dir=str(tmp_path / "c"),
    )
    prepared = prepare(**arguments)
    assert prepared.stats["train_documents"] == 40 and prepared.stats["val_documents"] == 10
    assert prepared.stats["train_tokens"] == count_tokens(small_tokenizer, docs[:40])
    assert prepared.stats["val_tokens"] == count_tokens(small_tokenizer, docs[40:])
    # the folder's files decide its cache entry: changed text is prepared again
    (folder / "train.jsonl").write_text("".join(json.dumps({"id": 0, "body": d}) + "\n" for d in docs[:30]))
    assert prepare(**arguments).stats["train_documents"] == 30
    with pytest.raises(UserError, match="has no column 'text' \\(columns: id, body\\); set text_column"):
        prepare(**arguments | {"text_column": "text"})


def test_held_out_split_sizes_and_seed(tmp_path, small_tokenizer):
    docs = sentences(200)
    corpus = write_lines(tmp_path / "corpus.txt", docs)
    arguments = dict(
        tokenizer=small_tokenizer, train_files=[str(corpus)], val_fraction=0.15, cache_dir=str(tmp_path / "c")
    )
    split = prepare(**arguments)
    assert split.stats["val_documents"] == 30 and split.stats["train_documents"] == 170
    assert split.stats["train_tokens"] + split.stats["val_tokens"] == count_tokens(small_tokenizer, docs)
    again = prepare(**arguments | {"cache_dir": str(tmp_path / "other")})
    assert again.stats == split.stats
    reseeded = prepare(**arguments | {"seed": 1})
    assert reseeded.stats["val_documents"] == 30
    assert reseeded.stats["val_tokens"] != split.stats["val_tokens"] or reseeded.val[:] != split.val[:]


def test_hub_dataset_splits_and_column(tmp_path, small_tokenizer, monkeypatch):
    docs = sentences(50)
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"line": docs[:40] + ["", " "]}),
            "validation": datasets.Dataset.from_dict({"line": docs[40:]}),
        }
    )
    requested = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config: requested.append((name, config)) or splits)
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: True)
    prepared = prepare(
        tokenizer=small_tokenizer,
        dataset="someone/corpus",
        dataset_config="small",
        text_column="line",
        val_fraction=text.VAL_FRACTION,
        cache_dir=str(tmp_path / "c"),
    )
    assert requested == [("someone/corpus", "small")]
    assert prepared.stats["train_documents"] == 40 and prepared.stats["val_documents"] == 10
    assert prepared.stats["val_tokens"] == count_tokens(small_tokenizer, docs[40:])
    prepare(
        tokenizer=small_tokenizer,
        dataset="someone/corpus",
        dataset_config="small",
        text_column="line",
        val_fraction=text.VAL_FRACTION,
        cache_dir=str(tmp_path / "c"),
    )
    assert len(requested) == 1  # the second run came from the cache


def test_cache_notices_a_changed_file(tmp_path, small_tokenizer, monkeypatch):
    corpus = write_lines(tmp_path / "corpus.txt", sentences(50))
    val = write_lines(tmp_path / "val.txt", sentences(10, seed=1))
    arguments = dict(
        tokenizer=small_tokenizer, train_files=[str(corpus)], val_files=[str(val)], cache_dir=str(tmp_path / "c")
    )
    counter = MapCounter(monkeypatch)
    first = prepare(**arguments)
    write_lines(corpus, sentences(80))
    os.utime(corpus, ns=(time.time_ns(), time.time_ns() + 10**9))
    changed = prepare(**arguments)
    assert counter.calls == 4
    assert changed.stats["train_documents"] == 80 != first.stats["train_documents"]
    prepare(**arguments | {"block_size": 8})
    assert counter.calls == 6  # block size is part of the key


def test_several_processes_give_the_same_blocks(tmp_path, small_tokenizer):
    corpus = write_lines(tmp_path / "corpus.txt", sentences(400))
    arguments = dict(tokenizer=small_tokenizer, train_files=[str(corpus)])
    one = prepare(**arguments, cache_dir=str(tmp_path / "one"))
    two = prepare(**arguments, num_proc=2, cache_dir=str(tmp_path / "two"))
    assert one.stats == two.stats
    assert one.train["input_ids"] == two.train["input_ids"] and one.val["input_ids"] == two.val["input_ids"]


# --------------------------------------------------------------------------- bad input


def test_a_missing_file_is_named(tmp_path, small_tokenizer):
    with pytest.raises(UserError, match="train file .*missing.txt.* does not exist"):
        prepare(tokenizer=small_tokenizer, train_files=[str(tmp_path / "missing.txt")], cache_dir=str(tmp_path))
    corpus = write_lines(tmp_path / "corpus.txt", sentences(5))
    with pytest.raises(UserError, match="val file .*nothing-\\*.txt.* does not exist"):  # no globs
        prepare(
            tokenizer=small_tokenizer,
            train_files=[str(corpus)],
            val_files=[str(tmp_path / "nothing-*.txt")],
            cache_dir=str(tmp_path),
        )
    with pytest.raises(UserError, match="x.csv' is not a .txt file"):
        prepare(
            tokenizer=small_tokenizer,
            train_files=[str(write_lines(tmp_path / "x.csv", ["a"]))],
            cache_dir=str(tmp_path),
        )


def test_empty_corpus_is_reported(tmp_path, small_tokenizer):
    empty = tmp_path / "empty.txt"
    empty.write_text("\ufeff\n   \n\n", encoding="utf-8")
    corpus = write_lines(tmp_path / "corpus.txt", sentences(5))
    with pytest.raises(UserError, match="the validation text makes no block .*\\(0 tokens in all\\)"):
        prepare(tokenizer=small_tokenizer, train_files=[str(corpus)], val_files=[str(empty)], cache_dir=str(tmp_path))
    with pytest.raises(UserError, match="val_fraction=0.1 of 0 documents leaves no training text"):
        prepare(tokenizer=small_tokenizer, train_files=[str(empty)], cache_dir=str(tmp_path))


def test_missing_tokenizer_path_is_named(tmp_path):
    corpus = write_lines(tmp_path / "corpus.txt", sentences(5))
    with pytest.raises(UserError, match="tokenizer directory .*nowhere/tok.* does not exist"):
        prepare(tokenizer=str(tmp_path / "nowhere" / "tok"), train_files=[str(corpus)], cache_dir=str(tmp_path))


@pytest.mark.parametrize(
    ("objective", "vocab_size", "match"),
    [
        ("mlm", 4, "too small for a wordpiece tokenizer"),
        ("clm", 200, "too small for a bpe tokenizer.*256-byte alphabet"),
        ("mlm", None, "pass either `tokenizer`.*or `vocab_size`"),
    ],
)
def test_tokenizer_training_arguments_are_checked_before_reading(tmp_path, objective, vocab_size, match):
    corpus = write_lines(tmp_path / "corpus.txt", sentences(5))
    with pytest.raises(UserError, match=match):
        prepare(objective=objective, vocab_size=vocab_size, train_files=[str(corpus)], cache_dir=str(tmp_path))


def test_uncached_hub_dataset_fails_offline(tmp_path, monkeypatch, small_tokenizer):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: pytest.fail("probed the hub although HF_HUB_OFFLINE=1"))
    flag_before = datasets.config.HF_HUB_OFFLINE
    with pytest.raises(UserError) as caught:
        prepare(
            tokenizer=small_tokenizer,
            dataset="tiedemb-test/no-such-corpus",
            dataset_config="x",
            cache_dir=str(tmp_path),
        )
    message = str(caught.value)
    assert "tiedemb-test/no-such-corpus" in message and "train_files" in message and "local cache" in message
    assert "\n" not in message
    assert datasets.config.HF_HUB_OFFLINE == flag_before  # the temporary offline switch is undone


def test_uncached_hub_tokenizer_fails_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = write_lines(tmp_path / "corpus.txt", sentences(5))
    with pytest.raises(UserError, match="tiedemb-test/no-such-tokenizer.*local tokenizer directory"):
        prepare(tokenizer="tiedemb-test/no-such-tokenizer", train_files=[str(corpus)], cache_dir=str(tmp_path))


def test_no_validation_text_is_refused(tmp_path, small_tokenizer):
    # The options' own bounds and choices are PretrainData's (tests/test_every_option.py).
    corpus = write_lines(tmp_path / "corpus.txt", sentences(5))
    with pytest.raises(UserError, match="no validation text"):
        prepare(tokenizer=small_tokenizer, train_files=[str(corpus)], cache_dir=str(tmp_path), val_fraction=0.0)
