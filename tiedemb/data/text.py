"""Real text for pretraining: read a corpus, tokenise it, cut it into fixed-size blocks, cache it.

``plan_text`` decides a text's tokenizer and its cache entry (keyed by the sources, the tokenizer
and the block size); ``TextCache.write`` makes the entry and ``open`` opens it: one
``datasets.Dataset`` of ``block_size`` token ids a row per split (train, val, ood_val). Documents
are concatenated with a separator after each and cut into blocks, so only each split's final
partial block is dropped. The text goes through memory-mapped Arrow files, never Python objects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerFast

from tiedemb.data.preparing import from_hub
from tiedemb.data.tokenizers import (
    DISK_REMEDY,
    TOKENIZER_KIND,
    VAL_FRACTION,
    cache_key,
    check_vocab_size,
    configure_for_objective,
    expand_files,
    file_identity,
    load_tokenizer,
    text_source,
    tokenizer_fingerprint,
    train_tokenizer,
)
from tiedemb.errors import UserError, first_line
from tiedemb.options import changed_from_default, no_effect, warn_no_effect
from tiedemb.training.files import atomic_directory, disk_full_is_reported, out_of_space

log = logging.getLogger("tiedemb.data")

CACHE_FORMAT = 1  # bumped when the cache's layout changes, so stale entries are not read
MAP_BATCH_SIZE = 1000  # rows per tokenising call: enough to keep the Rust tokenizer's threads busy
MAX_DOCUMENT_BYTES = 8 << 20  # a longer line is refused: tokenising it takes about 1 GB per 8 MB


@dataclass
class TextCache:
    """A text's tokenizer and its cache entry, known before any text is tokenised."""

    folder: Path
    tokenizer: PreTrainedTokenizerFast
    separator: int
    block_size: int
    num_proc: int | None
    read: Callable[[Path], dict[str, datasets.Dataset]] = field(repr=False)  # each split's documents, into a folder

    def write(self) -> None:
        """Read, tokenise and block the text into the cache entry, unless it is there already."""
        if (self.folder / "stats.json").is_file():
            return
        with _working_folder(self.folder.parent) as work:
            splits = {name: self._cut(name, documents, work) for name, documents in self.read(work).items()}
            stats = {key: value for _, counts in splits.values() for key, value in counts.items()}
            # the pretraining text's totals: its training and validation splits
            stats["discarded_tokens"] = stats["train_discarded_tokens"] + stats["val_discarded_tokens"]
            stats["documents"] = stats["separator_tokens"] = stats["train_documents"] + stats["val_documents"]
            stats["block_size"] = self.block_size
            # Written whole or not at all: a crash (or a full disk) never leaves a half-written entry.
            with (
                disk_full_is_reported(self.folder.parent, "the prepared text", DISK_REMEDY),
                atomic_directory(self.folder, "stats.json") as staging,
            ):
                for name, (blocks, _) in splits.items():
                    blocks.save_to_disk(str(staging / name))
                self.tokenizer.save_pretrained(staging / "tokenizer")
                (staging / "stats.json").write_text(json.dumps(stats, indent=2))
        log.info("saved prepared text to %s", self.folder)

    def _cut(self, name: str, documents: datasets.Dataset, work: Path) -> tuple[datasets.Dataset, dict[str, int]]:
        fingerprint = f"tiedemb-{self.folder.name}-{name}"
        tokenized = _tokenize_documents(documents, self.tokenizer, self.separator, self.num_proc, fingerprint)
        blocks, total, dropped = _blocks(tokenized, self.block_size, work / f"{name}-blocks.arrow")
        log.info(
            "%s: %d documents, %d tokens (a separator each) -> %d blocks of %d, %d trailing tokens discarded",
            *(name, len(documents), total, len(blocks), self.block_size, dropped),
        )
        if not len(blocks):  # an empty split cannot be saved and read back, nor trained or validated on
            what = {"train": "training", "val": "validation", "ood_val": "out-of-domain validation"}[name]
            raise UserError(
                f"the {what} text makes no block of data.block_size={self.block_size} tokens "
                f"({total} tokens in all); lower data.block_size or give more text"
            )
        counts = {"tokens": total, "blocks": len(blocks), "discarded_tokens": dropped, "documents": len(documents)}
        return blocks, {f"{name}_{key}": value for key, value in counts.items()}

    def stats(self) -> dict[str, float]:
        return json.loads((self.folder / "stats.json").read_text())

    def open(self) -> dict[str, datasets.Dataset]:
        names = [name for name in ("train", "val", "ood_val") if (self.folder / name).is_dir()]
        opened = {name: datasets.load_from_disk(str(self.folder / name)) for name in names}
        log.info("prepared text in %s: %s", self.folder, {name: len(split) for name, split in opened.items()})
        return opened


def plan_text(settings: Mapping[str, Any], objective: str) -> TextCache:
    """The tokenizer of the text ``settings`` (``PretrainData``'s) name, and its cache entry; without
    ``tokenizer``, one trained on the training text (read now: the model's vocabulary is its size)."""
    kind = TOKENIZER_KIND[objective]
    source, train, val = text_source(settings)
    ood = expand_files(settings["ood_val_files"], "ood_val") if settings.get("ood_val_files") else []
    name, vocab_size = settings.get("tokenizer"), settings.get("vocab_size")
    if name is None:
        tokenizer, identity = None, {"trained": kind, "vocab_size": check_vocab_size(kind, vocab_size)}
    else:
        tokenizer = load_tokenizer(name)
        identity = {"name": name, "size": len(tokenizer), "hash": tokenizer_fingerprint(tokenizer)}
        if vocab_size is not None and vocab_size != len(tokenizer):
            # A warning, not an error: overlays such as configs/scale/tiny.yaml size a trained tokenizer
            # and compose with data configs that name a tokenizer.
            warn_no_effect(
                "data.vocab_size",
                vocab_size,
                f"with data.tokenizer={name!r}, which has {len(tokenizer)} tokens: "
                "the vocabulary is the tokenizer's; drop data.vocab_size",
            )
    key = {"format": CACHE_FORMAT, "source": source, "tokenizer": identity}
    key |= {"block_size": settings["block_size"], "objective": objective}
    if ood:
        key["ood_val"] = file_identity(ood)
    cache_dir = Path(settings.get("cache_dir") or "data/cache").expanduser()
    folder = cache_dir / "text" / cache_key(key)
    read = partial(_read_splits, settings=settings, train=train, val=val, ood=ood)
    if tokenizer is None and (folder / "stats.json").is_file():
        tokenizer = load_tokenizer(folder / "tokenizer")  # the one the cached blocks were cut with
    elif tokenizer is None:
        save_dir = cache_dir / "tokenizers" / f"{kind}-{vocab_size}-{cache_key(source)}"
        with _working_folder(folder.parent) as work:  # the text is read only if the tokenizer is not there
            tokenizer = train_tokenizer(
                _training_texts(read, work), kind=kind, vocab_size=vocab_size, save_dir=save_dir
            )
    separator = configure_for_objective(tokenizer, objective)
    return TextCache(folder, tokenizer, separator, settings["block_size"], settings.get("num_proc"), read)


def _training_texts(read: Callable[[Path], dict[str, datasets.Dataset]], work: Path) -> Iterator[str]:
    for batch in read(work)["train"].iter(batch_size=1000):
        yield from batch["text"]


def _read_splits(
    work: Path, *, settings: Mapping[str, Any], train: list[Path], val: list[Path], ood: list[Path]
) -> dict[str, datasets.Dataset]:
    """The documents of each split: non-empty and stripped, read into Arrow files under ``work``."""
    dataset, val_fraction = settings.get("dataset"), settings["val_fraction"]
    if dataset is not None:
        splits = _load_hub(dataset, settings.get("dataset_config"), settings["text_column"])
        held = next((name for name in ("validation", "valid", "dev") if name in splits), None)
        documents = {"train": splits["train"], **({"val": splits[held]} if held else {})}
        if held and not val and changed_from_default(val_fraction, VAL_FRACTION):
            raise no_effect(
                "data.val_fraction",
                val_fraction,
                f"with data.dataset={dataset!r}, whose own validation split is the validation text",
            )
        documents = {name: _clean(split, settings["text_column"]) for name, split in documents.items()}
    else:
        documents = {"train": read_files(train, "train", work)}
    if val:  # an empty text is refused when cut into blocks (it makes none)
        documents["val"] = read_files(val, "val", work)
    if "val" not in documents:  # a seeded random fraction held out, both parts kept in corpus order
        if val_fraction <= 0:
            raise UserError(
                "no validation text: pass val_files, use a dataset with a validation split, or set val_fraction > 0"
            )
        total = len(documents["train"])
        count = max(1, round(total * val_fraction))
        if count >= total:
            raise UserError(f"val_fraction={val_fraction} of {total} documents leaves no training text")
        held_out = np.zeros(total, dtype=bool)
        held_out[np.random.default_rng(settings["corpus_seed"]).choice(total, size=count, replace=False)] = True
        every = documents["train"]
        documents = {"train": every.select(np.flatnonzero(~held_out)), "val": every.select(np.flatnonzero(held_out))}
    if ood:
        documents["ood_val"] = read_files(ood, "ood_val", work)
    return documents


def _load_hub(name: str, config: str | None, column: str) -> datasets.DatasetDict:
    """A hub dataset (or a local folder ``datasets`` loads) with a train split and the text column."""
    advice = (
        ". Pass local text instead with train_files (and val_files), a local folder of .jsonl or .parquet "
        "files, or the name of a dataset already in the local cache"
    )
    splits = from_hub(f"dataset {name!r} (config {config!r})", lambda: datasets.load_dataset(name, config), advice)
    if "train" not in splits:
        raise UserError(f"dataset {name!r} has no train split (splits: {', '.join(splits)})")
    columns = splits["train"].column_names
    if column not in columns:
        raise UserError(f"dataset {name!r} has no column {column!r} (columns: {', '.join(columns)}); set text_column")
    return splits


def _clean(split: datasets.Dataset, column: str) -> datasets.Dataset:
    """A text column, stripped, without missing or blank documents; memory-mapped beside its input."""

    def clean(batch: dict[str, list]) -> dict[str, list[str]]:
        return {"text": [text for text in (str(value).strip() for value in batch[column] if value is not None) if text]}

    return split.map(clean, batched=True, remove_columns=split.column_names, desc="cleaning text")


def read_files(paths: list[Path], role: str, work_dir: Path) -> datasets.Dataset:
    """The documents of ``.txt`` files, one a line, in order, as one memory-mapped dataset (``text``)."""
    parts = []
    for path in paths:
        if not path.stat().st_size:
            continue  # the builder refuses empty files
        try:
            # utf-8-sig drops the byte-order mark WikiText (and Windows editors) put first
            lines = datasets.load_dataset(
                "text", data_files=[str(path)], split="train", cache_dir=str(work_dir), encoding="utf-8-sig"
            )
        except Exception as error:  # any failure to read a user's file is reported as theirs
            if out_of_space(error) or isinstance(error, MemoryError):
                raise  # the machine's problem, not the file's (the caller reports a full disk)
            cause = error.__cause__ or error
            what = "is not UTF-8 text (convert it to UTF-8)" if isinstance(cause, UnicodeDecodeError) else "unreadable"
            raise UserError(f"{role} file {str(path)!r} {what}: {first_line(cause)}") from None
        too_long = pc.index(pc.greater(pc.binary_length(lines.data.column("text")), MAX_DOCUMENT_BYTES), True).as_py()
        if too_long >= 0:
            raise UserError(
                f"{role} file {str(path)!r}, line {too_long + 1}: a document of more than {MAX_DOCUMENT_BYTES} bytes, "
                "too long to tokenise in one piece; break it into lines (each line of a .txt file is a document)"
            )
        parts.append(lines)
    if not parts:
        return datasets.Dataset.from_dict({"text": []}, features=datasets.Features({"text": datasets.Value("string")}))
    return _clean(parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts), "text")


def _tokenize_documents(
    documents: datasets.Dataset, tokenizer, separator: int, num_proc: int | None, fingerprint: str
) -> datasets.Dataset:
    """One row of ids per document, each followed by one separator (no [CLS]/[SEP] template)."""
    backend = tokenizer.backend_tokenizer

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        encodings = backend.encode_batch_fast(batch["text"], add_special_tokens=False)
        return {"input_ids": [encoding.ids + [separator] for encoding in encodings]}

    return documents.map(
        encode,
        batched=True,
        batch_size=MAP_BATCH_SIZE,
        num_proc=num_proc,
        remove_columns=["text"],
        new_fingerprint=fingerprint,  # spares datasets from hashing the whole tokenizer
        desc="tokenising",
    )


def _blocks(tokenized: datasets.Dataset, block_size: int, path: Path) -> tuple[datasets.Dataset, int, int]:
    """All rows concatenated and cut into ``block_size`` blocks, written to ``path`` one record batch
    at a time (a batch's unfinished block carried to the next); them, the total and the dropped tokens."""
    schema = pa.schema({"input_ids": pa.list_(pa.int32(), block_size)})
    total, carried = 0, pa.array([], pa.int32())
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in tokenized.data.to_batches():
            ids = pc.list_flatten(batch.column("input_ids")).cast(pa.int32())
            total += len(ids)
            stream = pa.concat_arrays([carried, ids])
            blocks = len(stream) // block_size
            if blocks:
                kept = pa.FixedSizeListArray.from_arrays(stream.slice(0, blocks * block_size), block_size)
                writer.write_batch(pa.record_batch([kept], schema=schema))
            carried = stream.slice(blocks * block_size)
    return datasets.Dataset.from_file(str(path)), total, len(carried)


@contextlib.contextmanager
def _working_folder(parent: Path) -> Iterator[Path]:
    """A hidden folder under ``parent`` for one preparation's Arrow files, removed afterwards."""
    parent.mkdir(parents=True, exist_ok=True)
    with (
        disk_full_is_reported(parent, "the text being prepared", DISK_REMEDY),
        tempfile.TemporaryDirectory(prefix=".preparing-", dir=parent) as work,
    ):
        yield Path(work)
