"""``tiedemb data prepare``: the data the shipped configs read, by name, fetched and converted under ``data/``.

Brown comes through NLTK's downloader, the rest from the Hugging Face hub; the converters need no
network (the tests hand them small files in each source's format). Each data set is made in a
staging folder inside the data folder and renamed into place whole, so a failed download leaves no
half-made file; ``SHA256SUMS`` lists the sha256 of every file in place. A loader that misses one
of these files says the command that makes it (``prepare_hint``). Free of heavy imports: error
paths and the sweep reader ask it for hints.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePath
from typing import Any

from tiedemb.data.glue_tasks import TASKS, GlueTask
from tiedemb.errors import UserError, first_line
from tiedemb.training.files import atomic_write_text, disk_full_is_reported, ordinary_permissions

DATA_DIR = Path("data")  # relative to the working folder, as the shipped configs read it
CHECKSUMS = "SHA256SUMS"  # sha256sum's format, one prepared file a line
ENTRIES = {
    "brown": "text/brown.txt",
    "wikitext-2": "text/wikitext-2-valid.txt",
    "mrpc": "glue/MRPC",
    "mnli": "glue/MNLI",
    "bert-base-uncased": "tokenizers/bert-base-uncased",
}
"""Name -> the file or folder it is, in the data folder (README's Data section: what each holds)."""


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (``CHECKSUMS`` lists them; cache keys hold them)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_for(path: str | os.PathLike) -> str | None:
    """The name of the data set whose file or folder ``path`` is, or lies in, under a folder named ``data``."""
    parts = PurePath(os.path.expanduser(str(path))).parts
    for name, location in ENTRIES.items():
        wanted = (DATA_DIR.name, *PurePath(location).parts)
        if any(parts[start : start + len(wanted)] == wanted for start in range(len(parts) - len(wanted) + 1)):
            return name
    return None


def prepare_hint(path: str | os.PathLike) -> str:
    """`` (`tiedemb data prepare NAME` makes it)`` for a missing path a named data set provides, else ``""``."""
    name = entry_for(path)
    return f" (`tiedemb data prepare {name}` makes it)" if name is not None else ""


HUB_DATASETS = {
    "wikitext-2": ("Salesforce/wikitext", "wikitext-2-v1"),
    "mrpc": ("nyu-mll/glue", "mrpc"),
    "mnli": ("nyu-mll/glue", "mnli"),
}
# the model's config.json too: it names the tokenizer's class where tokenizer_config.json does not
TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
BROWN_FILE = re.compile(r"c[a-z]\d\d")  # the names of Brown's tagged files, as NLTK's reader finds them
BROWN_QUOTES = {"``": '"', "''": '"'}  # NLTK's Brown writes quotes as TeX does; the studies' text has plain ones


def prepare(
    names: list[str], root: Path = DATA_DIR, force: bool = False, echo: Callable[[str], None] = print
) -> list[Path]:
    """Make each named data set under ``root``; returns what was written (one path per data set)."""
    unknown = [name for name in names if name not in ENTRIES]
    if unknown:
        raise UserError(f"unknown data name {unknown[0]!r}; known: {', '.join(ENTRIES)}")
    if not names:
        raise UserError(f"name the data to prepare: {', '.join(ENTRIES)}")
    if "brown" in names:
        try:
            importlib.import_module("nltk")
        except ImportError:
            raise UserError(
                "preparing brown downloads it with NLTK, which is not installed: pip install 'tiedemb[data]'"
            ) from None
    todo = []
    for name in dict.fromkeys(names):
        if (root / ENTRIES[name]).exists() and not force:
            echo(f"{name}: {root / ENTRIES[name]} is there (--force makes it again)")
        else:
            todo.append(name)
    made_root = not root.exists()
    written: list[Path] = []
    try:
        for name in todo:
            root.mkdir(parents=True, exist_ok=True)
            location = ENTRIES[name]
            target = root / location
            work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=root))
            try:
                staged = work / "out" / location
                staged.parent.mkdir(parents=True)
                with disk_full_is_reported(root, location, "prepare it into another folder with --dir"):
                    summary = MAKERS[name](name, work, staged)
                ordinary_permissions(work / "out")  # mkdtemp's folder is private; what goes in place is not
                # What was there goes aside first, and is deleted with the staging folder.
                if target.is_symlink() or target.exists():
                    target.rename(work / "replaced")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, target)
                record_checksums(root, location)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            size = sum(path.stat().st_size for path in files_of(root, location))
            echo(f"{name}: {target} ({summary}, {size / 1e6:.1f} MB)")
            written.append(target)
    finally:
        if made_root and not written:
            shutil.rmtree(root, ignore_errors=True)  # a first data set that failed leaves no empty folder
    if written:
        echo(f"checksums: {root / CHECKSUMS}")
    return written


def files_of(root: Path, location: str) -> list[Path]:
    place = root / location
    return [place] if place.is_file() else sorted(path for path in place.rglob("*") if path.is_file())


def record_checksums(root: Path, location: str) -> None:
    """Replace ``location``'s lines of ``SHA256SUMS`` by the sha256 of the files it now holds."""
    path = root / CHECKSUMS
    sums = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        digest, _, name = line.partition("  ")
        if name and name != location and not name.startswith(location + "/"):
            sums[name] = digest
    for file in files_of(root, location):
        sums[file.relative_to(root).as_posix()] = file_sha256(file)
    atomic_write_text(path, "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)))


def from_hub(what: str, fetch: Callable[[], Any], advice: str = "") -> Any:
    """``fetch()`` through the hub; any failure is one line (the hub clients' errors are many)."""
    from tiedemb.training.hub import hub_access

    with hub_access() as online:
        try:
            return fetch()
        except Exception as error:
            reason = "" if online else " (the hub cannot be reached, or HF_HUB_OFFLINE is set)"
            raise UserError(f"could not fetch {what} from the hub{reason}: {first_line(error)}{advice}") from None


def hub_splits(name: str) -> dict[str, Any]:
    import datasets

    repo, config = HUB_DATASETS[name]
    advice = "; elsewhere, prepare it there and copy the data folder here"
    loaded = from_hub(f"{repo} {config}", lambda: datasets.load_dataset(repo, config), advice)
    return {split: dataset.data for split, dataset in loaded.items()}


def make_brown(name: str, work: Path, out: Path) -> str:
    import nltk

    target = work / "nltk_data"
    try:
        done = nltk.download("brown", download_dir=str(target), quiet=True, raise_on_error=True)
    except Exception as error:  # the downloader's network and server errors alike
        raise UserError(f"could not download Brown with NLTK's downloader: {first_line(error)}") from None
    folder, archive = target / "corpora" / "brown", target / "corpora" / "brown.zip"
    if not done or not (folder.is_dir() or archive.is_file()):
        raise UserError(f"NLTK's downloader did not leave Brown in {str(target)!r}")
    (work / "unpacked").mkdir()
    return f"{write_brown(brown_files(folder if folder.is_dir() else archive, work / 'unpacked'), out)} documents"


def make_wikitext(name: str, work: Path, out: Path) -> str:
    return f"{write_wikitext(hub_splits(name)['validation'].column('text').to_pylist(), out)} lines"


def make_glue(name: str, work: Path, out: Path) -> str:
    written = write_glue(TASKS[name], hub_splits(name), out)
    return ", ".join(f"{name} {rows} rows" for name, rows in written.items())


def make_tokenizer(name: str, work: Path, out: Path) -> str:
    """The tokenizer's files as the hub holds them (not the weights), copied byte for byte, so their
    checksums do not depend on the transformers version."""
    from huggingface_hub import snapshot_download

    folder = from_hub(
        f"the tokenizer of {name}", lambda: Path(snapshot_download(name, allow_patterns=list(TOKENIZER_FILES)))
    )
    out.mkdir()
    copied = [shutil.copyfile(folder / file, out / file) for file in TOKENIZER_FILES if (folder / file).is_file()]
    return f"{len(copied)} files"


MAKERS: dict[str, Callable[[str, Path, Path], str]] = {  # (name, a scratch folder, where to write) -> a summary
    "brown": make_brown,
    "wikitext-2": make_wikitext,
    "mrpc": make_glue,
    "mnli": make_glue,
    "bert-base-uncased": make_tokenizer,
}


def brown_files(source: Path, unpack_to: Path) -> list[Path]:
    """The tagged files of NLTK's Brown in ``source`` (its folder, or its ``brown.zip`` unpacked into
    ``unpack_to``), in NLTK's order (sorted by name)."""
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            for name in archive.namelist():
                if BROWN_FILE.fullmatch(Path(name).name):
                    (unpack_to / Path(name).name).write_bytes(archive.read(name))
        source = unpack_to
    files = sorted(path for path in source.iterdir() if path.is_file() and BROWN_FILE.fullmatch(path.name))
    if not files:
        raise UserError(f"{str(source)!r} holds none of NLTK's tagged Brown files (ca01 ... cr09)")
    return files


def brown_words(tagged: str) -> list[str]:
    """The words of one tagged Brown file, tags removed as NLTK removes them (at the last ``/``)."""
    words = (token[: token.rfind("/")] if "/" in token else token for token in tagged.split())
    return [BROWN_QUOTES.get(word, word) for word in words]


def write_brown(files: Iterable[Path], out: Path) -> int:
    """``out``: one tagged file a line, its words joined by single spaces. Returns the number of documents."""
    documents = [" ".join(brown_words(path.read_text(encoding="utf-8"))) + "\n" for path in files]
    out.write_text("".join(documents), encoding="utf-8", newline="\n")
    return len(documents)


def write_wikitext(rows: Iterable[str | None], out: Path) -> int:
    """``out``: the original file's lines, a blank row as its blank line ``" \\n"``. Returns the number of lines."""
    count = 0
    with out.open("w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(" \n" if not row or not row.strip() else row if row.endswith("\n") else row + "\n")
            count += 1
    return count


def write_glue(task: GlueTask, splits: Mapping[str, Any], folder: Path) -> dict[str, int]:
    """``folder/<file>.tsv`` for every split of ``task`` (its classic names). Returns the rows per file."""
    layout = task.classic
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for split in task.splits:
        table = splits[split]
        # A field holds no tab or line break (the classic files never have one).
        texts = [
            [(text or "").translate(_TSV_BREAKS) for text in table.column(name).to_pylist()]
            for name in task.text_columns
        ]
        if split in task.test_splits:  # unlabelled: the example index first, as the classic test files have it
            indices = table.column("idx").to_pylist() if "idx" in table.column_names else range(len(texts[0]))
            header = [layout.index_column, *layout.text_columns]
            rows = [[str(index), *(text[row] for text in texts)] for row, index in enumerate(indices)]
        else:
            labels = table.column("label").to_pylist()
            header = [*layout.text_columns, layout.label_column]
            rows = [[*(text[row] for text in texts), layout.label_values[label]] for row, label in enumerate(labels)]
        name = layout.split_files[split]
        with (folder / name).open("w", encoding="utf-8", newline="\n") as handle:
            handle.writelines("\t".join(fields) + "\n" for fields in [header, *rows])
        written[name] = len(rows)
    return written


_TSV_BREAKS = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
