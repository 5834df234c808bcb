"""Each data source's own format converted to the files the studies read; no network here.

* Brown: NLTK's tagged files (``ca01`` ... ``cr09``, tokens ``word/tag`` separated by white space,
  a sentence a line) to one document a line, the words joined by single spaces, the tags removed
  and NLTK's opening and closing quotes (`````` and ``''``) written as ``"``.
* WikiText: the hub's rows (each an original line, a blank one as ``""``) to the original
  ``wiki.*.tokens`` text, blank lines as `` `` as there.
* GLUE: the hub's splits (text columns, label ids, ``-1`` in test splits) to the classic
  ``glue_data`` files ``tiedemb.data.glue_files`` reads: one TSV per split, with the header names
  of the classic files for the columns the hub keeps.

The fetching (``tiedemb.data.preparing``) hands these functions what it downloaded, and the
tests hand them small files written in each source's format.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tiedemb.data.glue_tasks import GlueTask
from tiedemb.errors import UserError

BROWN_FILE = re.compile(r"c[a-z]\d\d")
"""The names of Brown's tagged files, as NLTK's corpus reader finds them (its fileids)."""
BROWN_QUOTES = {"``": '"', "''": '"'}
"""NLTK's Brown writes quotes as TeX does; the studies' text has plain ``"`` (a token of its own)."""


# --------------------------------------------------------------------------- Brown


def brown_files(source: Path, unpack_to: Path) -> list[Path]:
    """The tagged files of NLTK's Brown in ``source`` (its folder, or its ``brown.zip`` unpacked into
    ``unpack_to``), in NLTK's order (sorted by name)."""
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            members = [name for name in archive.namelist() if BROWN_FILE.fullmatch(Path(name).name)]
            for name in members:
                target = unpack_to / Path(name).name
                target.write_bytes(archive.read(name))
        source = unpack_to
    files = sorted(path for path in source.iterdir() if path.is_file() and BROWN_FILE.fullmatch(path.name))
    if not files:
        raise UserError(f"{str(source)!r} holds none of NLTK's tagged Brown files (ca01 ... cr09)")
    return files


def brown_words(tagged: str) -> list[str]:
    """The words of one tagged Brown file, tags removed as NLTK removes them (at the last ``/``)."""
    words = []
    for token in tagged.split():
        slash = token.rfind("/")
        word = token[:slash] if slash >= 0 else token
        words.append(BROWN_QUOTES.get(word, word))
    return words


def brown_documents(files: Iterable[Path]) -> Iterator[str]:
    """One line of text per tagged file: its words joined by single spaces."""
    for path in files:
        try:
            tagged = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise UserError(f"{str(path)!r} is not text as NLTK's Brown files are: {error.reason}") from None
        words = brown_words(tagged)
        if not words:
            raise UserError(f"{str(path)!r} holds no words; is it one of NLTK's tagged Brown files?")
        yield " ".join(words)


def write_brown(files: Iterable[Path], out: Path) -> int:
    """``out``: one document a line. Returns the number of documents."""
    count = 0
    with out.open("w", encoding="utf-8", newline="\n") as handle:
        for document in brown_documents(files):
            handle.write(document + "\n")
            count += 1
    return count


# --------------------------------------------------------------------------- WikiText


def wikitext_lines(rows: Iterable[str | None]) -> Iterator[str]:
    """The original file's lines from the hub's rows: a blank row is the original's blank line ``" \\n"``."""
    for row in rows:
        if not row or not row.strip():
            yield " \n"
        else:
            yield row if row.endswith("\n") else row + "\n"


def write_wikitext(rows: Iterable[str | None], out: Path) -> int:
    """``out``: the text, one paragraph or heading a line. Returns the number of lines."""
    count = 0
    with out.open("w", encoding="utf-8", newline="\n") as handle:
        for line in wikitext_lines(rows):
            handle.write(line)
            count += 1
    return count


# --------------------------------------------------------------------------- GLUE

_TSV_BREAKS = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
"""A field of a TSV row holds no tab or line break (the classic files never have one)."""


def field(text: str | None) -> str:
    """A TSV field: the text, without tabs or line breaks."""
    return (text or "").translate(_TSV_BREAKS)


def column(table: Any, name: str) -> list:
    """A column of an Arrow table (``pyarrow.Table``, or a ``datasets`` dataset's ``.data``) as a list."""
    return table.column(name).to_pylist()


def glue_rows(task: GlueTask, split: str, table: Any, where: str) -> tuple[list[str], Iterator[list[str]]]:
    """The header and the rows of one split's classic file, from the hub's columns."""
    layout = task.classic
    missing = [name for name in (*task.text_columns, "label") if name not in table.column_names]
    if missing:
        raise UserError(
            f"{where}: the {split} split lacks the column(s) {', '.join(missing)} of {task.name} on the hub "
            f"(found: {', '.join(table.column_names) or 'none'})"
        )
    texts = [column(table, name) for name in task.text_columns]
    if split in task.test_splits:  # unlabelled: the example index first, as the classic test files have it
        indices = column(table, "idx") if "idx" in table.column_names else list(range(len(texts[0])))
        header = [layout.index_column, *layout.text_columns]
        rows = ([str(index), *(field(text[row]) for text in texts)] for row, index in enumerate(indices))
        return header, rows
    labels = column(table, "label")
    for row, label in enumerate(labels):
        if not isinstance(label, int) or not 0 <= label < len(layout.label_values):
            raise UserError(
                f"{where}: row {row + 1} of the {split} split has label {label!r}, not a {task.name} label id "
                f"(0-{len(layout.label_values) - 1})"
            )
    # The label last: MNLI's reader takes the last field (its files carry annotators' labels before
    # the gold one); the others find their label column by its header name.
    header = [*layout.text_columns, layout.label_column or "gold_label"]
    return header, (
        [*(field(text[row]) for text in texts), layout.label_values[label]] for row, label in enumerate(labels)
    )


def write_glue(task: GlueTask, splits: Mapping[str, Any], folder: Path, where: str) -> dict[str, int]:
    """``folder/<file>.tsv`` for every split of ``task`` (its classic names). Returns the rows per file."""
    absent = [split for split in task.splits if split not in splits]
    if absent:
        found = ", ".join(splits) or "none"
        raise UserError(f"{where} has no {', '.join(absent)} split of {task.name} (found: {found})")
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for split in task.splits:
        name = task.classic.split_files[split]
        header, rows = glue_rows(task, split, splits[split], where)
        count = 0
        with (folder / name).open("w", encoding="utf-8", newline="\n") as handle:
            handle.write("\t".join(header) + "\n")
            for fields in rows:
                handle.write("\t".join(fields) + "\n")
                count += 1
        if not count:
            raise UserError(f"{where}: the {split} split of {task.name} has no examples")
        written[name] = count
    return written
