"""Hostile local text: not UTF-8, one giant line, a full disk; and reading through datasets' builders
gives exactly the blocks the earlier in-memory reading gave."""

from __future__ import annotations

import errno
from pathlib import Path

import datasets
import numpy as np
import pytest
from text_helpers import prepare, sentences

from tiedemb.data import text
from tiedemb.data import tokenizers as tk
from tiedemb.data.pretrain import PretrainData
from tiedemb.data.text import read_files
from tiedemb.errors import UserError

# --------------------------------------------------------------------------- not UTF-8


def test_a_file_that_is_not_utf8_is_named_with_its_first_bad_byte(tmp_path, small_tokenizer):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"doc one alpha\r\ndoc two beta\r\n" + "caf\u00e9 gamma\n".encode("latin-1"))
    with pytest.raises(UserError) as raised:
        prepare(tokenizer=small_tokenizer, train_files=[str(corpus)], cache_dir=str(tmp_path / "c"))
    message = str(raised.value)
    assert message.startswith(f"train file {str(corpus)!r} is not UTF-8 text (convert it to UTF-8): "), message
    assert "byte 0xe9" in message and "\n" not in message
    assert not (tmp_path / "c" / "text").exists() or not any((tmp_path / "c" / "text").iterdir())  # nothing left behind


def test_utf8_with_any_line_ends_and_a_byte_order_mark_is_read(tmp_path):
    clean = "\ufeffdoc \u00e9t\u00e9 \u4e2d\u6587\r\n\r\nline three \U0001f600\rline four\n".encode()
    path = tmp_path / "mixed.txt"
    path.write_bytes(clean)
    assert read_files([path], "train", tmp_path / "work")["text"][0] == "doc \u00e9t\u00e9 \u4e2d\u6587"
    path.write_bytes(clean + b"five \r six \xf0\x9f")  # cut short by the end of the file
    with pytest.raises(UserError, match=r"val file .*mixed.txt' is not UTF-8 text"):
        read_files([path], "val", tmp_path / "work")


def test_text_in_another_encoding_is_refused_and_no_option_reads_it_otherwise(tmp_path, small_tokenizer):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("\n".join(sentences(30)).encode() + b"\ncaf\xe9 alpha\n")
    with pytest.raises(UserError, match="is not UTF-8 text"):
        prepare(tokenizer=small_tokenizer, train_files=[str(corpus)], cache_dir=str(tmp_path / "c"))
    with pytest.raises(TypeError, match="encoding_errors"):
        PretrainData(train_files=[str(corpus)], tokenizer=small_tokenizer, encoding_errors="replace")


# --------------------------------------------------------------------------- one giant document


def test_a_file_without_a_line_break_is_refused_before_it_is_tokenised(tmp_path, monkeypatch):
    giant = tmp_path / "giant.txt"
    with giant.open("wb") as handle:
        for _ in range(8):
            handle.write(b"word " * (1 << 18))  # 8 x 1.25 MiB = 10 MiB of words and spaces on one line
    monkeypatch.setattr(text, "_tokenize_documents", None)  # never reached
    with pytest.raises(UserError) as raised:
        prepare(vocab_size=100, train_files=[str(giant)], cache_dir=str(tmp_path / "c"))
    assert str(raised.value).startswith(
        f"train file {str(giant)!r}, line 1: a document of more than {8 << 20} bytes, too long to "
        "tokenise in one piece; break it into lines (each line of a .txt file is a document)"
    )


def test_a_long_line_further_on_is_named_by_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "MAX_DOCUMENT_BYTES", 64)
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"short one\r\nshort two\r\n\r\n" + b"x" * 64 + b"\r\n" + b"y" * 65 + b"\r\nend\r\n")
    first = tmp_path / "first.txt"
    first.write_text("a\n" + "b" * 64 + "\n")
    with pytest.raises(UserError, match=r"corpus.txt', line 5: a document of more than 64"):
        read_files([first, path], "train", tmp_path / "work")


def test_json_lines_and_parquet_files_are_refused_naming_the_dataset_option(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "alpha"}\n')
    with pytest.raises(UserError, match=r"records.jsonl' is not a .txt file .* pass their folder as data.dataset"):
        prepare(vocab_size=100, train_files=[str(records)], cache_dir=str(tmp_path / "c"))


# --------------------------------------------------------------------------- a full disk


def full_disk(*_, **__):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_saving_keeps_earlier_entries_and_leaves_no_partial_one(
    tmp_path, small_tokenizer, monkeypatch
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(60)))
    cache = tmp_path / "cache"
    arguments = dict(tokenizer=small_tokenizer, train_files=[str(corpus)], cache_dir=str(cache))
    earlier = prepare(**arguments)
    before = {path: path.read_bytes() for path in (cache / "text").rglob("*") if path.is_file()}
    real_save = datasets.Dataset.save_to_disk
    calls = []

    def save_then_fill_the_disk(self, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the training blocks are written, then the disk is full
            full_disk()
        return real_save(self, path, *args, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", save_then_fill_the_disk)
    with pytest.raises(UserError) as raised:
        prepare(**arguments | {"block_size": 8})
    assert str(raised.value).startswith(
        f"no space left on the device holding {str(cache / 'text')!r} while writing "
        "the prepared text; the partial copy was removed and earlier files there are intact"
    )
    assert str(raised.value).endswith("set data.cache_dir to a folder on a larger disk")
    after = {path: path.read_bytes() for path in (cache / "text").rglob("*") if path.is_file()}
    assert after == before  # the earlier entry, byte for byte; no staging folder, no working files
    monkeypatch.setattr(datasets.Dataset, "save_to_disk", real_save)
    again = prepare(**arguments)
    assert again.stats == earlier.stats and again.train["input_ids"] == earlier.train["input_ids"]


def test_a_full_disk_while_saving_a_trained_tokenizer_is_one_message(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(60)))
    monkeypatch.setattr(tk.PreTrainedTokenizerFast, "save_pretrained", full_disk)
    with pytest.raises(
        UserError,
        match=r"no space left on the device holding '.*tokenizers' while writing the trained "
        r"tokenizer",
    ):
        prepare(vocab_size=100, train_files=[str(corpus)], cache_dir=str(tmp_path / "cache"))
    assert [path.name for path in (tmp_path / "cache" / "tokenizers").iterdir()] == []
    assert [path.name for path in (tmp_path / "cache" / "text").iterdir()] == []


# --------------------------------------------------------------------------- the same blocks as before


def earlier_documents(path: Path) -> list[str]:
    """The documents of one file as prepare_text read them into Python lists before it used datasets' builders."""
    with path.open(encoding="utf-8-sig") as handle:
        return [text for text in (line.strip() for line in handle) if text]


def earlier_stream(files: list[Path], tokenizer, separator: int) -> tuple[np.ndarray, int]:
    """Every document's ids and one separator, concatenated as before; and the number of documents."""
    documents = [doc for path in files for doc in earlier_documents(path)]
    ids = [i for doc in documents for i in tokenizer(doc, add_special_tokens=False).input_ids + [separator]]
    return np.array(ids), len(documents)


def test_reading_through_builders_gives_the_blocks_the_earlier_reading_gave(tmp_path, small_tokenizer, monkeypatch):
    # small tokenising batches, so the blocks are cut across many record batches of the tokenised file
    monkeypatch.setattr(text, "MAP_BATCH_SIZE", 7)
    docs = sentences(120, seed=3)
    (tmp_path / "a.txt").write_bytes(("\ufeff" + "\r\n".join(f"  {d}\t" for d in docs[:30]) + "\n\n \n\t\n").encode())
    (tmp_path / "b.txt").write_text("\n\n".join(docs[30:50]) + "\ndoc tail without a line end")
    (tmp_path / "c.txt").write_text("\r".join(docs[50:100]) + "\r", encoding="utf-8-sig")
    (tmp_path / "f.txt").write_text("".join(d + "\n" for d in docs[100:]))
    train = [tmp_path / name for name in ("b.txt", "a.txt", "c.txt")]  # given order, not sorted
    val = [tmp_path / "f.txt"]
    tokenizer = tk.load_tokenizer(small_tokenizer)
    separator = tk.configure_for_objective(tokenizer, "mlm")
    prepared = prepare(
        tokenizer=small_tokenizer,
        train_files=[str(p) for p in train],
        val_files=[str(p) for p in val],
        block_size=16,
        cache_dir=str(tmp_path / "c"),
    )
    for split, files in (("train", train), ("val", val)):
        stream, documents = earlier_stream(files, tokenizer, separator)
        blocks = getattr(prepared, split).with_format("numpy")[:]["input_ids"]
        assert len(blocks) > 2
        np.testing.assert_array_equal(blocks, stream[: len(stream) // 16 * 16].reshape(-1, 16))
        assert prepared.stats[f"{split}_documents"] == documents
        assert prepared.stats[f"{split}_tokens"] == len(stream)
        assert prepared.stats[f"{split}_discarded_tokens"] == len(stream) % 16
    assert prepared.stats["train_documents"] == 100 + 1  # the last line of b.txt has no line end
    assert prepared.train.features["input_ids"] == datasets.List(datasets.Value("int32"), length=16)
