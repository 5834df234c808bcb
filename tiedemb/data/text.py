"""Real text for pretraining: read a corpus, tokenise it, cut it into fixed-size blocks, cache it.

``plan_text`` decides a hub dataset's or local files' tokenizer and the cache entry of their
blocks; its ``TextCache`` writes the entry (``PretrainData.prepare_data``) and opens it as two
``datasets.Dataset`` objects whose rows are exactly ``block_size`` token ids (``setup``).
Documents are concatenated with one separator token after each and the stream is cut into blocks,
so only the final partial block of each split is dropped (and counted). The entry is keyed by the
source, the tokenizer and the block size, and later runs open it instead of tokenising again.
``run_tokenizer`` finds a run's tokenizer again from the settings its checkpoint recorded.

No step holds the corpus in Python objects: local files are read into memory-mapped Arrow
files (``tiedemb.data.text_files``), tokenised by ``datasets.map`` into more of them, and cut into
blocks one record batch at a time. These working files live in a hidden folder under
``cache_dir/text`` that is removed once the prepared text is saved. (Measured: 1 GB of text
peaks at about 2.5 GiB resident; benchmarks/RESULTS.md, "Data preparation".)
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
from tiedemb.data.text_files import SUFFIXES, read_files
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
from tiedemb.errors import UserError, check_choice, first_line
from tiedemb.options import changed_from_default, no_effect, warn_no_effect
from tiedemb.training.files import atomic_directory, disk_full_is_reported
from tiedemb.training.hub import hub_access

__all__ = [
    "PreparedText",
    "TextCache",
    "plan_text",
    "prepare_text",
    "run_tokenizer",
    "tokenizer_of_run",
    "train_tokenizer",
]

log = logging.getLogger("tiedemb.data")

#: Bumped whenever the layout of the cache changes, so stale entries are not read.
CACHE_FORMAT = 1
#: Rows per ``datasets.map`` call: large enough that the Rust tokenizer's own threads stay busy.
MAP_BATCH_SIZE = 2000
#: Text per ``datasets.map`` call, on average: fewer rows per call for long documents, so the
#: tokenizer's working memory (about 100 bytes per token) stays near 100 MB whatever the corpus.
MAP_BATCH_BYTES = 4 << 20
TOKENIZER_KIND = {"mlm": "wordpiece", "clm": "bpe"}


@dataclass
class PreparedText:
    """Blocks of token ids ready for a language-modelling data loader.

    ``train`` and ``val`` have one column, ``input_ids``: fixed-length lists of ``block_size``
    int32 ids (``with_format("torch")`` yields int64 tensors). ``stats`` counts, per split and
    overall: ``{train,val}_tokens`` (the whole stream, separators included), ``{train,val}_blocks``,
    ``{train,val}_discarded_tokens`` and ``discarded_tokens`` (the dropped final partial blocks),
    ``{train,val}_documents``, ``documents`` and ``separator_tokens`` (one per document).
    """

    train: datasets.Dataset
    val: datasets.Dataset
    tokenizer: PreTrainedTokenizerFast
    stats: dict[str, float]


# --------------------------------------------------------------------------- sources


def _expand(patterns: list[str], role: str) -> list[Path]:
    """Paths and globs to a sorted, de-duplicated list of existing files."""
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
        if path.suffix.lower() not in SUFFIXES:
            raise UserError(
                f"{role} file {str(path)!r} is not a .txt file (one document a line); for JSON lines or parquet "
                "files, pass their folder as data.dataset (and the field holding the text as data.text_column)"
            )
    return list(dict.fromkeys(path.resolve() for path in files))


def _file_identity(paths: list[Path]) -> list[tuple[str, int, str]]:
    """What decides a file's contents for caching purposes: its path, size and a hash of its bytes.

    Not its modification time: a copy of the same text synced again, or touched, must find the
    tokenizer trained on it. A tokenizer trained again is not the same one: the trainer numbers
    tokens of equal standing in an order that differs from process to process, so a model
    pretrained with one and fine-tuned or resumed with the other reads the wrong rows.
    """
    return [(str(path), path.stat().st_size, file_sha256(path)) for path in paths]


def _read_documents(paths: list[Path], role: str, work_dir: Path) -> datasets.Dataset:
    """Non-empty, stripped documents from all files: one per line."""
    return _clean_documents(read_files(paths, role, work_dir), "text")


def _clean(values: list) -> list[str]:
    """Strip surrounding whitespace and skip missing or blank documents."""
    return [text for text in (str(value).strip() for value in values if value is not None) if text]


def _clean_batch(batch: dict[str, list], column: str) -> dict[str, list[str]]:
    return {"text": _clean(batch[column])}


def _clean_documents(split: datasets.Dataset, column: str) -> datasets.Dataset:
    """A text column, cleaned; stays memory-mapped (the map's result is cached beside its input)."""
    return split.map(
        partial(_clean_batch, column=column), batched=True, remove_columns=split.column_names, desc="cleaning text"
    )


def _load_hub_splits(name: str, config: str | None, column: str) -> tuple[datasets.Dataset, datasets.Dataset | None]:
    """Documents of a hub dataset's train split and, if it has one, its validation split."""
    with hub_access() as online:
        try:
            splits = datasets.load_dataset(name, config)
        except (OSError, ValueError) as error:
            if online or not isinstance(error, ConnectionError):
                problem = f"could not load dataset {name!r} (config {config!r}): {first_line(error)}."
            else:
                problem = (
                    f"dataset {name!r} (config {config!r}) is not in the local Hugging Face cache, "
                    "and the hub cannot be reached (or HF_HUB_OFFLINE is set)."
                )
            raise UserError(
                f"{problem} Pass local text instead with train_files (and val_files): paths or globs of .txt files; "
                "or a local folder of .jsonl or .parquet files; or the name of a dataset already in the local cache."
            ) from None
    if "train" not in splits:
        raise UserError(f"dataset {name!r} has no train split (splits: {', '.join(splits)})")
    if column not in splits["train"].column_names:
        raise UserError(
            f"dataset {name!r} has no column {column!r} "
            f"(columns: {', '.join(splits['train'].column_names)}); set text_column"
        )
    val_split = next((s for s in ("validation", "valid", "dev") if s in splits), None)
    val = _clean_documents(splits[val_split], column) if val_split else None
    return _clean_documents(splits["train"], column), val


def _hold_out(documents: datasets.Dataset, fraction: float, seed: int) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Split off a seeded random ``fraction`` of documents as validation, keeping both in corpus order."""
    if fraction <= 0:
        raise UserError(
            "no validation text: pass val_files, use a dataset with a validation split, or set val_fraction > 0"
        )
    count = max(1, round(len(documents) * fraction))
    if count >= len(documents):
        raise UserError(f"val_fraction={fraction} of {len(documents)} documents leaves no training text")
    held = np.zeros(len(documents), dtype=bool)
    held[np.random.default_rng(seed).choice(len(documents), size=count, replace=False)] = True
    return documents.select(np.flatnonzero(~held)), documents.select(np.flatnonzero(held))


# --------------------------------------------------------------------------- tokenising and blocking


def _encode(batch: dict[str, list[str]], backend, separator: int) -> dict[str, list[list[int]]]:
    """Token ids of each document followed by one separator (no [CLS]/[SEP] template)."""
    encodings = backend.encode_batch_fast(batch["text"], add_special_tokens=False)
    return {"input_ids": [encoding.ids + [separator] for encoding in encodings]}


def _map_batch_size(documents: datasets.Dataset) -> int:
    """Rows per tokenising call: ``MAP_BATCH_SIZE``, fewer where documents are long (``MAP_BATCH_BYTES``)."""
    texts = documents.data.column("text")
    average = (pc.sum(pc.binary_length(texts)).as_py() or 0) / max(1, len(texts))  # no rows: a null sum
    return max(1, min(MAP_BATCH_SIZE, int(MAP_BATCH_BYTES // max(1.0, average))))


def _tokenize_documents(
    documents: datasets.Dataset, tokenizer, separator: int, num_proc: int | None, fingerprint: str
) -> datasets.Dataset:
    """One row of ids per document, via a batched ``datasets.map`` over the fast tokenizer's batch call."""
    return documents.map(
        partial(_encode, backend=tokenizer.backend_tokenizer, separator=separator),
        batched=True,
        batch_size=_map_batch_size(documents),
        num_proc=num_proc,
        remove_columns=["text"],
        # An explicit fingerprint spares datasets from hashing the whole tokenizer.
        new_fingerprint=fingerprint,
        desc="tokenising",
    )


def _group_into_blocks(tokenized: datasets.Dataset, block_size: int, path: Path) -> tuple[datasets.Dataset, int, int]:
    """Concatenate all rows and cut exact ``block_size`` blocks; return them, total and dropped tokens.

    The rows are read one record batch at a time from the memory-mapped tokenised file and the
    blocks written to the Arrow file ``path`` as they fill, carrying the tokens of an unfinished
    block to the next batch: the same blocks as cutting the whole stream at once, in the memory
    of one batch.
    """
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


# --------------------------------------------------------------------------- cache


def _cache_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _save(folder: Path, parts: dict[str, datasets.Dataset], stats: dict, tokenizer=None) -> None:
    """Write a cache entry atomically, so a crash (or a full disk) never leaves a half-written one."""
    with (
        disk_full_is_reported(folder.parent, "the prepared text", DISK_REMEDY),
        atomic_directory(folder, "stats.json") as staging,
    ):
        for name, part in parts.items():
            part.save_to_disk(str(staging / name))
        if tokenizer is not None:
            tokenizer.save_pretrained(staging / "tokenizer")
        (staging / "stats.json").write_text(json.dumps(stats, indent=2))


def _source_identity(
    dataset: str | None,
    dataset_config: str | None,
    text_column: str,
    train_paths: list[Path],
    val_paths: list[Path],
    val_fraction: float,
    seed: int,
) -> dict:
    """What decides the text a run reads: the cache keys of its prepared text and trained tokenizer."""
    source: dict = {"dataset": dataset, "config": dataset_config, "column": text_column}
    source |= {"train": _file_identity(train_paths), "val": _file_identity(val_paths)}
    if dataset is not None and Path(dataset).expanduser().is_dir():  # a local folder: its files decide the text
        folder = Path(dataset).expanduser()
        source["files"] = _file_identity(sorted(path for path in folder.rglob("*") if path.is_file()))
    if not val_paths:  # the split itself may decide the validation text
        source |= {"val_fraction": val_fraction, "seed": seed}
    return source


def _trained_tokenizer_dir(cache_dir: str, kind: str, size: str, source: dict) -> Path:
    return Path(cache_dir).expanduser() / "tokenizers" / f"{kind}-{size}-{_cache_key(source)}"


def _trained_tokenizer_dirs(settings: Mapping[str, Any]) -> list[Path]:
    """The saved tokenizers ``plan_text`` trained for the text a run's data ``settings`` describe (one
    per requested size), if any; ``seed`` is the seed that split it. Local files are identified by
    path, size and a hash of their bytes, so a text file changed since the run finds nothing."""
    objective = check_choice("objective", settings["objective"], TOKENIZER_KIND)
    try:
        train_paths = _expand(settings["train_files"], "train") if settings.get("train_files") else []
        val_paths = _expand(settings["val_files"], "val") if settings.get("val_files") else []
    except UserError:
        return []  # the text is gone, and with it the key its tokenizer was saved under
    source = _source_identity(
        settings.get("dataset"),
        settings.get("dataset_config"),
        settings.get("text_column", TEXT_COLUMN),
        train_paths,
        val_paths,
        settings.get("val_fraction", VAL_FRACTION),
        settings["seed"],
    )
    pattern = _trained_tokenizer_dir(settings.get("cache_dir", "data/cache"), TOKENIZER_KIND[objective], "*", source)
    return sorted(path for path in pattern.parent.glob(pattern.name) if (path / "tokenizer.json").is_file())


def tokenizer_of_run(
    data: Mapping[str, Any], vocab_size: int, objective: str, fingerprint: str | None = None
) -> str | None:
    """Where the tokenizer of a pretraining run is, from the data settings its checkpoint recorded.

    The tokenizer the run named (``data.tokenizer``, as it was written, relative to the folder the
    run started in), or the folder of the one it trained whose vocabulary has ``vocab_size`` tokens
    (the run's ``data.cache_dir``) and, where the checkpoint recorded one, whose ``fingerprint``
    matches, or else any tokenizer in that cache with that fingerprint; ``None`` for the embedded
    corpus, or when the trained one is not found (another working directory, text files changed
    since and no fingerprint recorded, a tokenizer trained again).
    """
    if data.get("tokenizer"):
        return str(data["tokenizer"])
    if not (data.get("dataset") or data.get("train_files")):
        return None
    # The documents split by ``corpus_seed`` decide the training text (``seed`` orders the batches);
    # checkpoints from before ``corpus_seed`` existed split by ``seed``.
    split_seed = data["corpus_seed"] if "corpus_seed" in data else data.get("seed", 0)
    settings = {**data, "seed": split_seed, "objective": data.get("objective") or objective}
    # One folder per requested size; the data records the size the tokenizer came out at.
    candidates = _trained_tokenizer_dirs(settings)
    if fingerprint is not None:
        # A recorded fingerprint names the ids exactly: any tokenizer kept in the run's cache with
        # that fingerprint is the one, also when its folder's name came from an older key of its text.
        cache = Path(settings.get("cache_dir") or "data/cache").expanduser()
        kept = (folder for folder in sorted(cache.glob("tokenizers/*")) if (folder / "tokenizer.json").is_file())
        candidates += [folder for folder in kept if folder not in candidates]
    for folder in candidates:
        found = load_tokenizer(folder)
        if len(found) == vocab_size and fingerprint in (None, tokenizer_fingerprint(found)):
            return str(folder)
    return None


def run_tokenizer(checkpoint: Mapping[str, Any], path: str | os.PathLike):
    """The tokenizer a run's checkpoint was trained with (checked against the model's vocabulary), or
    ``None`` for the embedded corpus, found from any folder.

    The checkpoint records its data settings as the run was given them: a tokenizer folder
    (``data.tokenizer``) or, for pretraining text, the cache the run trained its tokenizer into
    (``data.cache_dir``), both relative to the folder the run started in. Each is looked for there
    first, then in the current folder (``tiedemb.training.evaluation.locate``).
    """
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
    found = tokenizer_of_run(
        data, vocab_size, str(hparams.get("objective") or "mlm"), fingerprint=recorded_fingerprint(checkpoint)
    )
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


# --------------------------------------------------------------------------- entry point


@dataclass
class TextCache:
    """A text's tokenizer and the cache entry its blocks go in, known before any text is tokenised.

    ``PretrainData.prepare_data`` makes the entry once (``write``; an entry already there is left
    as it is) and ``setup`` opens it (``open``), as Lightning's data hooks are meant to be used.
    """

    folder: Path
    tokenizer: PreTrainedTokenizerFast
    separator: int
    block_size: int
    num_proc: int | None
    read_documents: Callable[[Path], tuple[datasets.Dataset, datasets.Dataset]] = field(repr=False)

    @property
    def ready(self) -> bool:
        return (self.folder / "stats.json").is_file()

    def write(self) -> None:
        """Read, tokenise and block the text into the cache entry, unless it is there already."""
        if self.ready:
            return
        with _working_folder(self.folder.parent) as work:
            train_docs, val_docs = self.read_documents(work)
            key = self.folder.name
            blocks = _build(
                train_docs, val_docs, self.tokenizer, self.separator, self.block_size, self.num_proc, key, work
            )
            _save(self.folder, {"train": blocks.train, "val": blocks.val}, blocks.stats, blocks.tokenizer)
        log.info("saved prepared text to %s", self.folder)

    def stats(self) -> dict[str, float]:
        return json.loads((self.folder / "stats.json").read_text())

    def open(self) -> PreparedText:
        """The saved entry, memory-mapped (cheap to hand to data-loader worker processes)."""
        stats = self.stats()
        log.info(
            "prepared text in %s: %d train and %d val blocks", self.folder, stats["train_blocks"], stats["val_blocks"]
        )
        train, val = (datasets.load_from_disk(str(self.folder / split)) for split in ("train", "val"))
        return PreparedText(train, val, self.tokenizer, stats)


def plan_text(
    *,
    objective: str,
    tokenizer: str | None,
    vocab_size: int | None,
    dataset: str | None,
    dataset_config: str | None,
    train_files: list[str] | None,
    val_files: list[str] | None,
    text_column: str = TEXT_COLUMN,
    block_size: int = 128,
    val_fraction: float = VAL_FRACTION,
    num_proc: int | None = None,
    cache_dir: str = "data/cache",
    seed: int = 0,
) -> TextCache:
    """The tokenizer of a corpus for ``objective`` ("mlm" or "clm") and the cache entry of its blocks.

    ``tokenizer`` is a hub name or local directory; if None a WordPiece (mlm) or byte-level BPE
    (clm) tokenizer of ``vocab_size`` tokens is trained on the training text and kept in the cache
    (the one text tokenised before ``prepare_data``: the model's vocabulary is its size).
    Validation text comes from ``val_files``, else the dataset's validation split, else a seeded
    ``val_fraction`` of the documents.
    """
    kind = TOKENIZER_KIND[objective]
    train_paths = _expand(train_files, "train") if train_files else []
    val_paths = _expand(val_files, "val") if val_files else []
    if dataset is None and changed_from_default(text_column, TEXT_COLUMN):
        raise no_effect("data.text_column", text_column, "without data.dataset: each line of a .txt file is a document")
    source = _source_identity(dataset, dataset_config, text_column, train_paths, val_paths, val_fraction, seed)
    loaded, identity = _given_tokenizer(tokenizer, vocab_size, kind)
    key = _cache_key(
        {
            "format": CACHE_FORMAT,
            "source": source,
            "tokenizer": identity,
            "block_size": block_size,
            "objective": objective,
        }
    )
    folder = Path(cache_dir).expanduser() / "text" / key
    read = partial(
        _read_splits,
        dataset=dataset,
        dataset_config=dataset_config,
        train_paths=train_paths,
        val_paths=val_paths,
        text_column=text_column,
        val_fraction=val_fraction,
        seed=seed,
    )
    if loaded is None and (folder / "stats.json").is_file():
        loaded = load_tokenizer(folder / "tokenizer")  # the one the cached blocks were cut with
    elif loaded is None:
        save_dir = _trained_tokenizer_dir(cache_dir, kind, str(vocab_size), source)
        loaded = _trained(read, kind, vocab_size, save_dir, folder.parent)
    separator = configure_for_objective(loaded, objective)
    return TextCache(folder, loaded, separator, block_size, num_proc, read)


def _given_tokenizer(tokenizer: str | None, vocab_size: int | None, kind: str) -> tuple[Any, dict]:
    """The tokenizer named (``None`` when one is to be trained) and what identifies it in cache keys."""
    if tokenizer is None:
        return None, {"trained": kind, "vocab_size": check_vocab_size(kind, vocab_size)}
    loaded = load_tokenizer(tokenizer)
    if vocab_size is not None and vocab_size != len(loaded):
        # A warning, not an error: overlays such as configs/scale/tiny.yaml size a trained tokenizer and
        # compose with data configs that name a tokenizer.
        warn_no_effect(
            "data.vocab_size",
            vocab_size,
            f"with data.tokenizer={tokenizer!r}, which has {len(loaded)} tokens: "
            "the vocabulary is the tokenizer's; drop data.vocab_size",
        )
    return loaded, {"name": tokenizer, "size": len(loaded), "hash": tokenizer_fingerprint(loaded)}


def _trained(read: Callable, kind: str, vocab_size: int, save_dir: Path, parent: Path) -> PreTrainedTokenizerFast:
    """The tokenizer trained on the training documents (read only when it is not kept already)."""
    if (save_dir / "tokenizer.json").is_file():
        return train_tokenizer((), kind=kind, vocab_size=vocab_size, save_dir=save_dir)
    with _working_folder(parent) as work:
        train_docs, _ = read(work)
        texts = (doc for batch in train_docs.iter(batch_size=1000) for doc in batch["text"])
        return train_tokenizer(texts, kind=kind, vocab_size=vocab_size, save_dir=save_dir, length=len(train_docs))


def _read_splits(
    work: Path,
    *,
    dataset: str | None,
    dataset_config: str | None,
    train_paths: list[Path],
    val_paths: list[Path],
    text_column: str,
    val_fraction: float,
    seed: int,
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """The training and validation documents, read into Arrow files under ``work``."""
    if dataset is not None:
        train_docs, val_docs = _load_hub_splits(dataset, dataset_config, text_column)
        described = f"dataset {dataset!r}"
        if val_docs is not None and not val_paths and changed_from_default(val_fraction, VAL_FRACTION):
            raise no_effect(
                "data.val_fraction",
                val_fraction,
                f"with data.dataset={dataset!r}, whose own validation split is the validation text",
            )
    else:
        train_docs = _read_documents(train_paths, "train", work)
        val_docs, described = None, ", ".join(repr(str(p)) for p in train_paths)
    if not len(train_docs):
        raise UserError(f"the training text is empty (no non-blank documents in {described})")
    if val_paths:
        val_docs = _read_documents(val_paths, "val", work)
        if not len(val_docs):
            raise UserError(
                f"the validation text is empty (no non-blank documents in {', '.join(repr(str(p)) for p in val_paths)})"
            )
    if val_docs is None:
        train_docs, val_docs = _hold_out(train_docs, val_fraction, seed)
    return train_docs, val_docs


def prepare_text(**settings: Any) -> PreparedText:
    """``plan_text``'s text tokenised and blocked (from the cache when it is there), in one call."""
    cache = plan_text(**settings)
    cache.write()
    return cache.open()


@contextlib.contextmanager
def _working_folder(parent: Path) -> Iterator[Path]:
    """A hidden folder under ``parent`` for the Arrow files of one preparation, removed afterwards.

    A full disk while reading, tokenising or saving ends in one message; nothing of the
    preparation is left behind, and earlier cache entries are not touched.
    """
    parent.mkdir(parents=True, exist_ok=True)
    with (
        disk_full_is_reported(parent, "the text being prepared", DISK_REMEDY),
        tempfile.TemporaryDirectory(prefix=".preparing-", dir=parent) as work,
    ):
        yield Path(work)


def _build(
    train_docs, val_docs, tokenizer, separator: int, block_size: int, num_proc: int | None, key: str, work: Path
) -> PreparedText:
    """Tokenise and block both splits, and log what was kept and what was dropped."""
    splits, stats = {}, {}
    for name, documents in (("train", train_docs), ("val", val_docs)):
        tokenized = _tokenize_documents(documents, tokenizer, separator, num_proc, f"tiedemb-{key}-{name}")
        splits[name], total, dropped = _group_into_blocks(tokenized, block_size, work / f"{name}-blocks.arrow")
        stats |= {
            f"{name}_tokens": total,
            f"{name}_blocks": len(splits[name]),
            f"{name}_discarded_tokens": dropped,
            f"{name}_documents": len(documents),
        }
        log.info(
            "%s: %d documents, %d tokens (incl. %d separators) -> %d blocks of %d, %d trailing tokens discarded",
            name,
            len(documents),
            total,
            len(documents),
            len(splits[name]),
            block_size,
            dropped,
        )
        if not len(splits[name]):  # an empty split cannot be saved and read back, nor trained or validated on
            more = (
                "give more text"
                if name == "train"
                else "give more validation text (data.val_files, or a larger data.val_fraction)"
            )
            raise UserError(
                f"the {'training' if name == 'train' else 'validation'} text makes no block of "
                f"data.block_size={block_size} tokens ({total} tokens in all); lower data.block_size or {more}"
            )
    stats["discarded_tokens"] = stats["train_discarded_tokens"] + stats["val_discarded_tokens"]
    stats["documents"] = stats["separator_tokens"] = len(train_docs) + len(val_docs)
    stats["block_size"] = block_size
    return PreparedText(splits["train"], splits["val"], tokenizer, stats)


@dataclass
class ExtraTextCache:
    """Blocks of another text cut with a ``TextCache``'s tokenizer (a second validation text): made
    by ``write`` in ``prepare_data``, read by ``open`` in ``setup``, cached like the text's own blocks."""

    folder: Path
    paths: list[Path]
    text: TextCache
    max_blocks: int | None

    def write(self) -> None:
        if (self.folder / "stats.json").is_file():
            return
        text, block_size = self.text, self.text.block_size
        with _working_folder(self.folder.parent) as work:
            documents = _read_documents(self.paths, "ood_val", work)
            fingerprint = f"tiedemb-{self.folder.name.removeprefix('extra-')}-extra"
            tokenized = _tokenize_documents(documents, text.tokenizer, text.separator, text.num_proc, fingerprint)
            blocks, total, dropped = _group_into_blocks(tokenized, block_size, work / "extra-blocks.arrow")
            if not len(blocks):
                raise UserError(
                    f"data.ood_val_files make no block of data.block_size={block_size} tokens ({total} tokens in all)"
                )
            stats = {"tokens": total, "blocks": len(blocks), "discarded_tokens": dropped, "documents": len(documents)}
            _save(self.folder, {"blocks": blocks}, stats)
        log.info("saved the out-of-domain validation text to %s", self.folder)

    def open(self) -> datasets.Dataset:
        """The blocks, the first ``max_blocks`` only when given (the whole text is cached once)."""
        blocks = datasets.load_from_disk(str(self.folder / "blocks"))
        return blocks.select(range(min(self.max_blocks, len(blocks)))) if self.max_blocks is not None else blocks


def plan_extra_text(
    files: list[str],
    text: TextCache,
    *,
    objective: str,
    cache_dir: str = "data/cache",
    max_blocks: int | None = None,
) -> ExtraTextCache:
    """Where the blocks of ``files`` cut with ``text``'s tokenizer are cached, keyed by the files, the
    tokenizer and the block size."""
    paths = _expand(files, "ood_val")
    key = _cache_key(
        {
            "format": CACHE_FORMAT,
            "extra": _file_identity(paths),
            "encoding_errors": "strict",  # kept so that entries cached before stay valid
            "tokenizer": tokenizer_fingerprint(text.tokenizer),
            "block_size": text.block_size,
            "objective": objective,
        }
    )
    folder = Path(cache_dir).expanduser() / "text" / f"extra-{key}"
    return ExtraTextCache(folder, paths, text, max_blocks)
