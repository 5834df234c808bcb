"""Hostile local text: not UTF-8, one giant line, a full disk; and reading through datasets' builders
gives exactly the blocks the earlier in-memory reading gave."""

from __future__ import annotations

import errno
import json
import logging
import tracemalloc
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from text_helpers import prepare, sentences

from tiedemb.data import text, text_files
from tiedemb.data import tokenizers as tk
from tiedemb.data.pretrain import PretrainData
from tiedemb.data.text_files import check_bytes, read_files
from tiedemb.errors import UserError

# --------------------------------------------------------------------------- not UTF-8


def test_a_file_that_is_not_utf8_is_named_with_the_offset_and_line_of_its_first_bad_byte(tmp_path, small_tokenizer):
    corpus = tmp_path / "latin1.txt"
    good = b"doc one alpha\r\ndoc two beta\r\n"
    corpus.write_bytes(good + "caf\u00e9 gamma\n".encode("latin-1"))
    with pytest.raises(UserError) as raised:
        prepare(tokenizer=small_tokenizer, train_files=[str(corpus)], cache_dir=str(tmp_path / "c"))
    assert str(raised.value).startswith(
        f"train file {str(corpus)!r} is not UTF-8 text: byte 0xe9 at offset {len(good) + 3} (line 3) is not part of a "
        "UTF-8 character. Convert the file to UTF-8"
    )
    assert "data.encoding_errors=replace" in str(raised.value)
    assert not (tmp_path / "c" / "text").exists() or not any((tmp_path / "c" / "text").iterdir())  # nothing left behind


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1 << 20])
def test_the_offset_is_exact_whatever_the_chunks_and_characters_split_between_them_are_fine(
    tmp_path, monkeypatch, chunk
):
    monkeypatch.setattr(text_files, "SCAN_CHUNK_BYTES", chunk)
    clean = "\ufeffdoc \u00e9t\u00e9 \u4e2d\u6587\r\n\r\nline three \U0001f600\n".encode()
    path = tmp_path / "mixed.txt"
    path.write_bytes(clean)
    check_bytes(path, "train", "strict")  # multi-byte characters across chunk ends are not errors
    path.write_bytes(clean + b"four \xe4\xb8\n")  # a character cut short, then a line end
    with pytest.raises(UserError, match=rf"byte 0xe4 at offset {len(clean) + 5} \(line 4\)"):
        check_bytes(path, "val", "strict")
    path.write_bytes(clean + b"tail \xf0\x9f")  # cut short by the end of the file
    with pytest.raises(UserError, match=rf"val file .* byte 0xf0 at offset {len(clean) + 5} \(line 4\)"):
        check_bytes(path, "val", "strict")


def test_replacing_bad_bytes_is_opt_in_said_and_cached_apart(tmp_path, small_tokenizer, caplog):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("\n".join(sentences(30)).encode() + b"\ncaf\xe9 alpha\n")
    docs = read_files([corpus], "text", "train", "replace", tmp_path / "work", None)
    assert docs["text"][-1] == "caf\ufffd alpha"
    with caplog.at_level(logging.WARNING, logger="tiedemb.data"):
        replaced = prepare(
            tokenizer=small_tokenizer,
            train_files=[str(corpus)],
            cache_dir=str(tmp_path / "c"),
            encoding_errors="replace",
        )
    assert replaced.stats["documents"] == 31
    assert f"{str(corpus)!r} is not all UTF-8 text: from the byte 0xe9 at offset" in caplog.text
    assert "read as U+FFFD (data.encoding_errors=replace)" in caplog.text
    with pytest.raises(UserError, match="is not UTF-8 text"):  # strict is the default, and not served from the cache
        prepare(tokenizer=small_tokenizer, train_files=[str(corpus)], cache_dir=str(tmp_path / "c"))
    # the option is part of the key: valid text prepared both ways makes two entries
    valid = tmp_path / "valid.txt"
    valid.write_text("\n".join(sentences(30)))
    for errors in ("strict", "replace"):
        prepare(
            tokenizer=small_tokenizer, train_files=[str(valid)], cache_dir=str(tmp_path / "d"), encoding_errors=errors
        )
    assert len([entry for entry in (tmp_path / "d" / "text").iterdir() if (entry / "stats.json").is_file()]) == 2


def test_json_lines_with_bad_bytes_follow_the_same_option(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_bytes(b'{"text": "alpha"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(UserError, match=r"byte 0xe9 at offset 31 \(line 2\)"):
        read_files([records], "text", "train", "strict", tmp_path / "work", None)
    assert read_files([records], "text", "train", "replace", tmp_path / "work", None)["text"] == ["alpha", "caf\ufffd"]


def test_the_option_value_is_checked_like_every_other(tmp_path, small_tokenizer):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(20)))
    with pytest.raises(UserError, match="data.encoding_errors='ignore' is not a known choice; valid: strict, replace"):
        PretrainData(
            train_files=[str(corpus)],
            tokenizer=small_tokenizer,
            encoding_errors="ignore",
            cache_dir=str(tmp_path / "c"),
        )
    with pytest.raises(UserError, match="data.encoding_errors='replace' has no effect without data.train_files"):
        PretrainData(encoding_errors="replace")
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- one giant document


def test_a_100_mb_file_without_a_line_break_is_refused_in_bounded_memory(tmp_path):
    giant = tmp_path / "giant.txt"
    with giant.open("wb") as handle:
        for _ in range(80):
            handle.write(b"word " * (1 << 18))  # 80 x 1.25 MiB = 100 MiB of words and spaces, in about a second
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as raised:
            check_bytes(giant, "train", "strict")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(raised.value).startswith(
        f"train file {str(giant)!r}, line 1 (from byte offset 0): a document of more than {8 << 20} bytes, too long to "
        "tokenise in one piece; each line of a .txt file is one document, so break the text into lines"
    )
    assert peak < 16 << 20, f"held {peak / 2**20:.0f} MiB"


def test_a_long_line_further_on_is_named_by_line_and_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(text_files, "MAX_DOCUMENT_BYTES", 64)
    path = tmp_path / "corpus.txt"
    head = b"short one\r\nshort two\r\n\r\n"
    path.write_bytes(head + b"x" * 64 + b"\r\n" + b"y" * 65 + b"\r\nend\r\n")
    with pytest.raises(UserError, match=rf"line 5 \(from byte offset {len(head) + 66}\): a document of more than 64"):
        check_bytes(path, "train", "strict")
    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "a"}\n' + json.dumps({"text": "z" * 80}) + "\n")
    with pytest.raises(UserError, match=r"records.jsonl', line 2 \(from byte offset 14\): a record of more than 64"):
        check_bytes(records, "train", "strict")


def test_long_records_of_json_arrays_and_parquet_are_named_by_file_and_row(tmp_path, monkeypatch):
    monkeypatch.setattr(text_files, "MAX_DOCUMENT_BYTES", 64)
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"text": "short"}, {"text": "w" * 65}]))  # one line: that is how JSON is written
    with pytest.raises(UserError, match=r"array.json', row 2: a document of more than 64 bytes"):
        read_files([array], "text", "train", "strict", tmp_path / "work", None)
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": ["c", "d", "e" * 65]}), tmp_path / "b.parquet")
    with pytest.raises(UserError, match=r"b.parquet', row 3: a document of more than 64 bytes"):
        read_files([tmp_path / "a.parquet", tmp_path / "b.parquet"], "text", "val", "strict", tmp_path / "work", None)


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


def earlier_documents(path: Path, column: str) -> list[str]:
    """The documents of one file as prepare_text read them into Python lists before it used datasets' builders."""
    suffix = path.suffix.lower()
    if suffix == ".txt":
        with path.open(encoding="utf-8-sig") as handle:
            values = [line.strip() for line in handle]
    elif suffix == ".parquet":
        values = pq.read_table(path, columns=[column]).column(0).to_pylist()
    else:
        raw = path.read_text(encoding="utf-8-sig")
        rows = (
            json.loads(raw)
            if suffix == ".json" and raw.lstrip().startswith("[")
            else [json.loads(line) for line in raw.splitlines() if line.strip()]
        )
        values = [row[column] for row in rows]
    return [t for t in (str(v).strip() for v in values if v is not None) if t]


def earlier_stream(files: list[Path], column: str, tokenizer, separator: int) -> tuple[np.ndarray, int]:
    """Every document's ids and one separator, concatenated as before; and the number of documents."""
    documents = [doc for path in files for doc in earlier_documents(path, column)]
    ids = [i for doc in documents for i in tokenizer(doc, add_special_tokens=False).input_ids + [separator]]
    return np.array(ids), len(documents)


def test_reading_through_builders_gives_the_blocks_the_earlier_reading_gave(tmp_path, small_tokenizer, monkeypatch):
    # small tokenising batches, so the blocks are cut across many record batches of the tokenised file
    monkeypatch.setattr(text, "MAP_BATCH_SIZE", 7)
    docs = sentences(120, seed=3)
    (tmp_path / "a.txt").write_bytes(("\ufeff" + "\r\n".join(f"  {d}\t" for d in docs[:30]) + "\n\n \n\t\n").encode())
    (tmp_path / "b.txt").write_text("\n\n".join(docs[30:50]) + "\ndoc tail without a line end")
    (tmp_path / "c.jsonl").write_text(
        "".join(
            json.dumps({"text": d, "n": i}) + "\n" + ("\n" if i % 5 == 0 else "") for i, d in enumerate(docs[50:70])
        )
    )
    (tmp_path / "d.json").write_text(
        json.dumps([{"text": d} for d in docs[70:85]] + [{"text": "  "}, {"text": None}]), encoding="utf-8-sig"
    )
    pq.write_table(pa.table({"text": docs[85:100] + ["", None], "n": list(range(17))}), tmp_path / "e.parquet")
    (tmp_path / "f.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[100:]))
    train = [
        tmp_path / name for name in ("b.txt", "a.txt", "c.jsonl", "d.json", "e.parquet")
    ]  # given order, not sorted
    val = [tmp_path / "f.jsonl"]
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
        stream, documents = earlier_stream(files, "text", tokenizer, separator)
        blocks = getattr(prepared, split).with_format("numpy")[:]["input_ids"]
        assert len(blocks) > 2
        np.testing.assert_array_equal(blocks, stream[: len(stream) // 16 * 16].reshape(-1, 16))
        assert prepared.stats[f"{split}_documents"] == documents
        assert prepared.stats[f"{split}_tokens"] == len(stream)
        assert prepared.stats[f"{split}_discarded_tokens"] == len(stream) % 16
    assert prepared.stats["train_documents"] == 100 + 1  # the last line of b.txt has no line end
    assert prepared.train.features["input_ids"] == datasets.List(datasets.Value("int32"), length=16)
