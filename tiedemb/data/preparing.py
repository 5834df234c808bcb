"""Fetching the named data sets (``tiedemb.data.catalog``) and writing them under the data folder.

Brown comes through NLTK's downloader, WikiText-2, GLUE and the tokenizer from the Hugging Face
hub; what was fetched goes through ``tiedemb.data.source_formats``. A machine without the network
gets a copy of the data folder made elsewhere (``SHA256SUMS`` checks it).

Everything is asked for before anything is written: an unknown name and Brown without nltk are
refused in one line with nothing written. Each data set is made in
a staging folder inside the data folder and renamed into place whole, so a failed download leaves
no half-made file; ``SHA256SUMS`` then lists the sha256 of every file in place (``sha256sum -c
SHA256SUMS`` in the data folder checks them).
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tiedemb.data.catalog import CHECKSUMS, DATA_DIR, ENTRIES, Entry, file_sha256
from tiedemb.data.glue_tasks import TASKS
from tiedemb.data.source_formats import brown_files, column, write_brown, write_glue, write_wikitext
from tiedemb.errors import UserError, first_line
from tiedemb.training.files import atomic_write_text, disk_full_is_reported, ordinary_permissions

HUB_DATASETS = {
    "wikitext-2": ("Salesforce/wikitext", "wikitext-2-v1"),
    "mrpc": ("nyu-mll/glue", "mrpc"),
    "mnli": ("nyu-mll/glue", "mnli"),
}
"""Name -> (hub dataset, configuration)."""
HUB_TOKENIZERS = {"bert-base-uncased": "bert-base-uncased"}
"""Name -> the hub model whose tokenizer it is."""
TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
"""What a tokenizer folder holds: the model's config.json too, which names the tokenizer's class when
tokenizer_config.json does not (bert-base-uncased's)."""
NLTK_MISSING = "preparing brown downloads it with NLTK, which is not installed: pip install 'tiedemb[data]'"


# --------------------------------------------------------------------------- the request, checked whole


def requested(names: list[str]) -> list[Entry]:
    """The entries named, in order, once each; refuses what cannot be done before anything is written."""
    unknown = [name for name in names if name not in ENTRIES]
    if unknown:
        raise UserError(f"unknown data name {unknown[0]!r}; known: {', '.join(ENTRIES)}")
    entries = [ENTRIES[name] for name in dict.fromkeys(names)]
    if not entries:
        raise UserError(f"name the data to prepare: {', '.join(ENTRIES)}")
    if any(entry.name == "brown" for entry in entries):
        try:
            importlib.import_module("nltk")
        except ImportError:
            raise UserError(NLTK_MISSING) from None
    return entries


# --------------------------------------------------------------------------- fetching


def download_brown(work: Path) -> Path:
    """NLTK's Brown, downloaded into ``work``: its folder of tagged files (or its zip)."""
    import nltk

    target = work / "nltk_data"
    try:
        done = nltk.download("brown", download_dir=str(target), quiet=True, raise_on_error=True)
    except Exception as error:  # the downloader's network and server errors alike
        raise UserError(f"could not download Brown with NLTK's downloader: {first_line(error)}") from None
    folder = target / "corpora" / "brown"
    archive = target / "corpora" / "brown.zip"
    if not done or not (folder.is_dir() or archive.is_file()):
        raise UserError(f"NLTK's downloader did not leave Brown in {str(target)!r}")
    return folder if folder.is_dir() else archive


def hub_splits(name: str) -> dict[str, Any]:
    """A hub dataset's splits as Arrow tables, through ``datasets``' own loader and cache."""
    import datasets

    from tiedemb.training.hub import hub_access

    repo, config = HUB_DATASETS[name]
    with hub_access() as online:
        try:
            loaded = datasets.load_dataset(repo, config)
        except Exception as error:  # the hub clients' errors are many; every one means "not fetched"
            reason = "" if online else " (the hub cannot be reached, or HF_HUB_OFFLINE is set)"
            raise UserError(
                f"could not fetch {repo} {config} from the hub{reason}: {first_line(error)}; "
                "elsewhere, prepare it there and copy the data folder here"
            ) from None
    return {split: dataset.data for split, dataset in loaded.items()}


# --------------------------------------------------------------------------- making one data set


def make_brown(entry: Entry, work: Path, out: Path) -> str:
    origin = download_brown(work)
    unpacked = work / "unpacked"
    unpacked.mkdir()
    return f"{write_brown(brown_files(origin, unpacked), out)} documents"


def make_wikitext(entry: Entry, work: Path, out: Path) -> str:
    splits = hub_splits(entry.name)
    where = " ".join(HUB_DATASETS[entry.name])
    if "validation" not in splits:
        raise UserError(f"{where} has no validation split (found: {', '.join(splits) or 'none'})")
    table = splits["validation"]
    if "text" not in table.column_names:
        raise UserError(f"{where}: the validation split has no text column (found: {', '.join(table.column_names)})")
    return f"{write_wikitext(column(table, 'text'), out)} lines"


def make_glue(entry: Entry, work: Path, out: Path) -> str:
    where = " ".join(HUB_DATASETS[entry.name])
    written = write_glue(TASKS[entry.name], hub_splits(entry.name), out, where)
    return ", ".join(f"{name} {rows} rows" for name, rows in written.items())


def make_tokenizer(entry: Entry, work: Path, out: Path) -> str:
    """The tokenizer's files as the hub holds them, copied byte for byte, so their checksums do not
    depend on the transformers version; checked to load."""
    from transformers import AutoTokenizer

    folder = download_tokenizer(HUB_TOKENIZERS[entry.name])
    found = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not any(path.name in ("tokenizer.json", "vocab.txt") for path in found):
        raise UserError(f"{str(folder)!r} holds no tokenizer.json or vocab.txt")
    out.mkdir()
    for path in found:
        shutil.copyfile(path, out / path.name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(out))
    except Exception as error:  # OSError for a missing file; others for a broken one
        raise UserError(f"the tokenizer files of {str(folder)!r} do not load: {first_line(error)}") from None
    return f"{len(tokenizer)} tokens"


def download_tokenizer(repo: str) -> Path:
    """The folder of a hub model's tokenizer files (not its weights) in ``huggingface_hub``'s cache."""
    from huggingface_hub import snapshot_download

    from tiedemb.training.hub import hub_access

    with hub_access() as online:
        try:
            return Path(snapshot_download(repo, allow_patterns=list(TOKENIZER_FILES)))
        except Exception as error:  # the hub clients' errors are many; every one means "not fetched"
            reason = "" if online else " (the hub cannot be reached, or HF_HUB_OFFLINE is set)"
            raise UserError(
                f"could not fetch the tokenizer of {repo} from the hub{reason}: {first_line(error)}"
            ) from None


MAKERS: dict[str, Callable[[Entry, Path, Path], str]] = {
    "brown": make_brown,
    "wikitext-2": make_wikitext,
    "mrpc": make_glue,
    "mnli": make_glue,
    "bert-base-uncased": make_tokenizer,
}
"""Name -> what makes it: (entry, a scratch folder, where to write) -> a summary."""


# --------------------------------------------------------------------------- checksums


def files_of(root: Path, location: str) -> Iterator[Path]:
    """The files a data set's location holds (itself, if it is a file), in sorted order."""
    place = root / location
    yield from [place] if place.is_file() else sorted(path for path in place.rglob("*") if path.is_file())


def read_checksums(root: Path) -> dict[str, str]:
    """``SHA256SUMS`` as relative path -> sha256 (empty where there is none)."""
    path = root / CHECKSUMS
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if name:
            sums[name] = digest
    return sums


def record_checksums(root: Path, location: str) -> None:
    """Replace ``location``'s lines of ``SHA256SUMS`` by the sha256 of the files it now holds."""
    sums = {
        name: digest
        for name, digest in read_checksums(root).items()
        if name != location and not name.startswith(location + "/")
    }
    for path in files_of(root, location):
        sums[path.relative_to(root).as_posix()] = file_sha256(path)
    atomic_write_text(root / CHECKSUMS, "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)))


# --------------------------------------------------------------------------- the command's work


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


def put_in_place(staged: Path, target: Path, aside: Path) -> None:
    """Rename ``staged`` to ``target``; what was there goes to ``aside`` first (deleted with the staging folder)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        target.rename(aside)
    os.replace(staged, target)


def prepare(
    names: list[str],
    root: Path = DATA_DIR,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> list[Path]:
    """Make each named data set under ``root``; returns what was written (one path per data set)."""
    entries = requested(names)
    if root.exists() and not root.is_dir():
        raise UserError(f"the data folder {str(root)!r} is a file")
    todo = []
    for entry in entries:
        if (root / entry.location).exists() and not force:
            echo(f"{entry.name}: {root / entry.location} is there (--force makes it again)")
        else:
            todo.append(entry)
    made_root = not root.exists()
    written: list[Path] = []
    try:
        for entry in todo:
            root.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=root))
            try:
                staged = work / "out" / entry.location
                staged.parent.mkdir(parents=True)
                with disk_full_is_reported(root, entry.location, "prepare it into another folder with --dir"):
                    summary = MAKERS[entry.name](entry, work, staged)
                ordinary_permissions(work / "out")  # mkdtemp's folder is private; what goes in place is not
                put_in_place(staged, root / entry.location, work / "replaced")
                record_checksums(root, entry.location)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            size = sum(path.stat().st_size for path in files_of(root, entry.location))
            echo(f"{entry.name}: {root / entry.location} ({summary}, {megabytes(size)})")
            written.append(root / entry.location)
    finally:
        if made_root and not written:
            shutil.rmtree(root, ignore_errors=True)  # a first data set that failed leaves no empty folder
    if written:
        echo(f"checksums: {root / CHECKSUMS}")
    return written
