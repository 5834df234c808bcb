"""Real text for pretraining: read a corpus, tokenise it, cut it into fixed-size blocks, cache it.

``plan_text`` decides a text's tokenizer and its cache entry (keyed by the sources, the tokenizer
and the block size); ``TextCache.write`` makes the entry (``prepare_data``) and ``open`` opens it
(``setup``): one ``datasets.Dataset`` of ``block_size`` token ids a row per split (train, val,
ood_val). Documents are concatenated with a separator after each and cut into blocks, so only
each split's final partial block is dropped. No step holds the corpus in Python objects: text is
read, tokenised and blocked through memory-mapped Arrow files (benchmarks/RESULTS.md, "Data
preparation"). A document longer than ``MAX_DOCUMENT_BYTES`` is refused: tokenising one is one
call of the tokenizer, whose memory grows with it (about 1 GB for 8 MB).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
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

from tiedemb.data.catalog import file_sha256, prepare_hint
from tiedemb.data.text_settings import TEXT_COLUMN, VAL_FRACTION
from tiedemb.data.tokenizers import (
    DISK_REMEDY,
    check_vocab_size,
    configure_for_objective,
    has_no_tokenizer,
    load_tokenizer,
    recorded_fingerprint,
    tokenizer_fingerprint,
    train_tokenizer,
)
from tiedemb.errors import UserError, first_line
from tiedemb.options import changed_from_default, no_effect, warn_no_effect
from tiedemb.training.files import atomic_directory, disk_full_is_reported, out_of_space
from tiedemb.training.hub import hub_access

log = logging.getLogger("tiedemb.data")

CACHE_FORMAT = 1  # bumped when the cache's layout changes, so stale entries are not read
MAP_BATCH_SIZE = 2000  # rows per tokenising call: enough to keep the Rust tokenizer's threads busy
MAP_BATCH_BYTES = 4 << 20  # text per call, on average: the tokenizer's memory stays near 100 MB
MAX_DOCUMENT_BYTES = 8 << 20  # the longest document (line of a .txt file) read, in bytes
TOKENIZER_KIND = {"mlm": "wordpiece", "clm": "bpe"}


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
        """One split's blocks and its counts, logged."""
        fingerprint = f"tiedemb-{self.folder.name}-{name}"
        tokenized = _tokenize_documents(documents, self.tokenizer, self.separator, self.num_proc, fingerprint)
        blocks, total, dropped = _blocks(tokenized, self.block_size, work / f"{name}-blocks.arrow")
        log.info(
            "%s: %d documents, %d tokens (a separator each) -> %d blocks of %d, %d trailing tokens discarded",
            *(name, len(documents), total, len(blocks), self.block_size, dropped),
        )
        if not len(blocks):  # an empty split cannot be saved and read back, nor trained or validated on
            what, more = {
                "train": ("training", "give more text"),
                "val": ("validation", "give more validation text (data.val_files, or a larger data.val_fraction)"),
                "ood_val": ("out-of-domain validation", "give more of it (data.ood_val_files)"),
            }[name]
            raise UserError(
                f"the {what} text makes no block of data.block_size={self.block_size} tokens "
                f"({total} tokens in all); lower data.block_size or {more}"
            )
        counts = {"tokens": total, "blocks": len(blocks), "discarded_tokens": dropped, "documents": len(documents)}
        return blocks, {f"{name}_{key}": value for key, value in counts.items()}

    def stats(self) -> dict[str, float]:
        return json.loads((self.folder / "stats.json").read_text())

    def open(self) -> dict[str, datasets.Dataset]:
        """The saved splits, memory-mapped."""
        names = [name for name in ("train", "val", "ood_val") if (self.folder / name).is_dir()]
        opened = {name: datasets.load_from_disk(str(self.folder / name)) for name in names}
        log.info("prepared text in %s: %s", self.folder, {name: len(split) for name, split in opened.items()})
        return opened


def plan_text(settings: Mapping[str, Any], objective: str) -> TextCache:
    """The tokenizer of the text ``settings`` (``PretrainData``'s) name, and its cache entry.

    Without ``tokenizer`` one of ``vocab_size`` tokens is trained on the training text and kept in
    the cache: the one text read before ``prepare_data``, as the model's vocabulary is its size.
    """
    kind = TOKENIZER_KIND[objective]
    source, train, val = _source(settings)
    ood = _expand(settings["ood_val_files"], "ood_val") if settings.get("ood_val_files") else []
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
        key["ood_val"] = _file_identity(ood)
    cache_dir = Path(settings.get("cache_dir") or "data/cache").expanduser()
    folder = cache_dir / "text" / _cache_key(key)
    read = partial(_read_splits, settings=settings, train=train, val=val, ood=ood)
    if tokenizer is None and (folder / "stats.json").is_file():
        tokenizer = load_tokenizer(folder / "tokenizer")  # the one the cached blocks were cut with
    elif tokenizer is None:
        save_dir = cache_dir / "tokenizers" / f"{kind}-{vocab_size}-{_cache_key(source)}"
        if (save_dir / "tokenizer.json").is_file():
            tokenizer = train_tokenizer((), kind=kind, vocab_size=vocab_size, save_dir=save_dir)
        else:
            with _working_folder(folder.parent) as work:
                documents = read(work)["train"]
                texts = (doc for batch in documents.iter(batch_size=1000) for doc in batch["text"])
                tokenizer = train_tokenizer(
                    texts, kind=kind, vocab_size=vocab_size, save_dir=save_dir, length=len(documents)
                )
    separator = configure_for_objective(tokenizer, objective)
    return TextCache(folder, tokenizer, separator, settings["block_size"], settings.get("num_proc"), read)


def _source(settings: Mapping[str, Any]) -> tuple[dict, list[Path], list[Path]]:
    """What decides the text a run reads (its trained tokenizer's key), and its training and
    validation files. A checkpoint from before ``corpus_seed`` split by ``seed``."""
    dataset = settings.get("dataset")
    train = _expand(settings["train_files"], "train") if settings.get("train_files") else []
    val = _expand(settings["val_files"], "val") if settings.get("val_files") else []
    source: dict = {"dataset": dataset, "config": settings.get("dataset_config")}
    source |= {"column": settings.get("text_column", TEXT_COLUMN), "train": _file_identity(train)}
    source["val"] = _file_identity(val)
    if dataset is not None and Path(dataset).expanduser().is_dir():  # a local folder: its files decide the text
        folder = Path(dataset).expanduser()
        source["files"] = _file_identity(sorted(path for path in folder.rglob("*") if path.is_file()))
    if not val:  # the split itself may decide the validation text
        seed = settings["corpus_seed"] if "corpus_seed" in settings else settings.get("seed", 0)
        source |= {"val_fraction": settings.get("val_fraction", VAL_FRACTION), "seed": seed}
    return source, train, val


def _expand(patterns: list[str], role: str) -> list[Path]:
    """Paths and globs to a sorted, de-duplicated list of existing ``.txt`` files."""
    files: list[Path] = []
    for pattern in patterns:
        text = os.path.expanduser(str(pattern))
        if glob.has_magic(text):
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())
            if not matches:
                raise UserError(f"{role} pattern {pattern!r} matches no files")
            files.extend(matches)
        elif Path(text).is_file():
            files.append(Path(text))
        else:
            raise UserError(
                f"{role} file {pattern!r} does not exist"
                + (" (it is a directory; pass a glob such as dir/*.txt)" if Path(text).is_dir() else prepare_hint(text))
            )
    for path in files:
        if path.suffix.lower() != ".txt":
            raise UserError(
                f"{role} file {str(path)!r} is not a .txt file (one document a line); for JSON lines or parquet "
                "files, pass their folder as data.dataset (and the field holding the text as data.text_column)"
            )
    return list(dict.fromkeys(path.resolve() for path in files))


def _file_identity(paths: list[Path]) -> list[tuple[str, int, str]]:
    """A file's path, size and content hash, not its modification time: a touched copy of the text
    finds the tokenizer trained on it (a tokenizer trained again numbers its tokens differently)."""
    return [(str(path), path.stat().st_size, file_sha256(path)) for path in paths]


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
        described = f"dataset {dataset!r}"
    else:
        documents = {"train": read_files(train, "train", work)}
        described = ", ".join(repr(str(path)) for path in train)
    if not len(documents["train"]):
        raise UserError(f"the training text is empty (no non-blank documents in {described})")
    if val:
        documents["val"] = read_files(val, "val", work)
        if not len(documents["val"]):
            described = ", ".join(repr(str(path)) for path in val)
            raise UserError(f"the validation text is empty (no non-blank documents in {described})")
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
    with hub_access() as online:
        try:
            splits = datasets.load_dataset(name, config)
        except (OSError, ValueError) as error:
            reason = "" if online else " (the hub cannot be reached, or HF_HUB_OFFLINE is set)"
            raise UserError(
                f"could not load dataset {name!r} (config {config!r}){reason}: {first_line(error)}. "
                "Pass local text instead with train_files (and val_files): paths or globs of .txt files; "
                "or a local folder of .jsonl or .parquet files; or the name of a dataset already in the local cache."
            ) from None
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
            _first_bad_byte(path, role)
            raise UserError(
                f"could not read {role} file {str(path)!r}: {first_line(error.__cause__ or error)}"
            ) from None
        too_long = pc.index(pc.greater(pc.binary_length(lines.data.column("text")), MAX_DOCUMENT_BYTES), True).as_py()
        if too_long >= 0:
            raise UserError(
                f"{role} file {str(path)!r}, line {too_long + 1}: a document of more than {MAX_DOCUMENT_BYTES} bytes, "
                "too long to tokenise in one piece; each line of a .txt file is one document, so break the text "
                "into lines of fewer bytes (one per paragraph, say)"
            )
        parts.append(lines)
    if not parts:
        return datasets.Dataset.from_dict({"text": []}, features=datasets.Features({"text": datasets.Value("string")}))
    return _clean(parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts), "text")


def _first_bad_byte(path: Path, role: str) -> None:
    """Refuse ``path`` if it is not UTF-8, naming the offset and line of its first bad byte (a lone
    ``\\r`` ends a line too, as in the ``text`` builder)."""
    offset, line = 0, 1
    with path.open("rb") as handle:
        for piece in handle:
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError as error:
                before = piece[: error.start]
                at_line = line + before.count(b"\r") - before.count(b"\r\n")
                raise UserError(
                    f"{role} file {str(path)!r} is not UTF-8 text: byte 0x{piece[error.start]:02x} at offset "
                    f"{offset + error.start} (line {at_line}) is not part of a UTF-8 character. "
                    "Convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from None
            offset += len(piece)
            line += piece.count(b"\n") + piece.count(b"\r") - piece.count(b"\r\n")


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
        batch_size=_map_batch_size(documents),
        num_proc=num_proc,
        remove_columns=["text"],
        new_fingerprint=fingerprint,  # spares datasets from hashing the whole tokenizer
        desc="tokenising",
    )


def _map_batch_size(documents: datasets.Dataset) -> int:
    """Rows per tokenising call: ``MAP_BATCH_SIZE``, fewer where documents are long (``MAP_BATCH_BYTES``)."""
    texts = documents.data.column("text")
    average = (pc.sum(pc.binary_length(texts)).as_py() or 0) / max(1, len(texts))  # no rows: a null sum
    return max(1, min(MAP_BATCH_SIZE, int(MAP_BATCH_BYTES // max(1.0, average))))


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


def _cache_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


@contextlib.contextmanager
def _working_folder(parent: Path) -> Iterator[Path]:
    """A hidden folder under ``parent`` for one preparation's Arrow files, removed afterwards."""
    parent.mkdir(parents=True, exist_ok=True)
    with (
        disk_full_is_reported(parent, "the text being prepared", DISK_REMEDY),
        tempfile.TemporaryDirectory(prefix=".preparing-", dir=parent) as work,
    ):
        yield Path(work)


def tokenizer_of_run(
    data: Mapping[str, Any], vocab_size: int, objective: str, fingerprint: str | None = None
) -> str | None:
    """Where a pretraining run's tokenizer is, from its recorded data settings: the one it named, or
    the one it trained in its ``data.cache_dir`` (of ``vocab_size`` tokens and the recorded
    ``fingerprint``); ``None`` for the embedded corpus, or when the trained one is not found."""
    if data.get("tokenizer"):
        return str(data["tokenizer"])
    if not (data.get("dataset") or data.get("train_files")):
        return None
    kind = TOKENIZER_KIND[data.get("objective") or objective]
    cache = Path(data.get("cache_dir") or "data/cache").expanduser() / "tokenizers"
    try:  # one folder per requested size; the data records the size the tokenizer came out at
        candidates = sorted(cache.glob(f"{kind}-*-{_cache_key(_source(data)[0])}"))
    except UserError:
        candidates = []  # the text is gone, and with it the key its tokenizer was saved under
    if fingerprint is not None:
        # A recorded fingerprint names the ids exactly: any tokenizer kept in the run's cache with it is
        # the one, also when its folder's name came from an older key of its text.
        candidates += [folder for folder in sorted(cache.glob("*")) if folder not in candidates]
    for folder in candidates:
        if (folder / "tokenizer.json").is_file():
            found = load_tokenizer(folder)
            if len(found) == vocab_size and fingerprint in (None, tokenizer_fingerprint(found)):
                return str(folder)
    return None


def run_tokenizer(checkpoint: Mapping[str, Any], path: str | os.PathLike):
    """The tokenizer a run's checkpoint was trained with, or ``None`` for the embedded corpus, found
    from any folder (its paths looked for where the run started first, then here)."""
    from tiedemb.training.evaluation import locate, run_folder

    if has_no_tokenizer(checkpoint):
        return None
    hparams = checkpoint.get("hyper_parameters") or {}
    vocab_size = int(hparams.get("vocab_size") or 0)
    data = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    started = run_folder(checkpoint, path)
    for name in ("tokenizer", "cache_dir"):
        if data.get(name):
            data[name] = locate(str(data[name]), started) or data[name]
    objective = str(hparams.get("objective") or "mlm")
    found = tokenizer_of_run(data, vocab_size, objective, fingerprint=recorded_fingerprint(checkpoint))
    if found is None:
        cache = Path(str(data.get("cache_dir") or "data/cache")) / "tokenizers"
        raise UserError(
            f"the tokenizer the run of {str(path)!r} trained is not in {str(cache)!r} (its data.cache_dir); "
            "run from the folder the run was started in, or keep its cache"
        )
    tokenizer = load_tokenizer(found)
    if vocab_size and len(tokenizer) != vocab_size:
        raise UserError(
            f"the run's tokenizer {found!r} has {len(tokenizer)} tokens, but the model's vocabulary has {vocab_size}"
        )
    return tokenizer
