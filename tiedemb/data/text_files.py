"""Local text files for pretraining: checked byte by byte, then read as memory-mapped datasets.

A ``.txt`` file holds one document per line (a leading byte-order mark is dropped; ``\\n``,
``\\r\\n`` and ``\\r`` end lines), ``.jsonl`` / ``.json`` one per record and ``.parquet`` one per
row, in the ``text_column`` field. The files are read by ``datasets``' own builders (``text``,
``json``, ``parquet``) into Arrow files under a working folder, so a corpus larger than memory is
never held in Python lists; consecutive files of one kind are read by one builder call, in order.

Before a builder sees a text file, ``check_bytes`` reads it once in chunks of at most
``SCAN_CHUNK_BYTES``, so its memory stays bounded whatever the file holds, and refuses:

* bytes that are not UTF-8, naming the byte offset and line of the first one (unless the user
  opted in to ``encoding_errors="replace"``, which reads them as U+FFFD and says where);
* a line of a ``.txt`` or ``.jsonl`` file (one document) longer than ``MAX_DOCUMENT_BYTES``.
  Tokenising one document is one call of the tokenizer, whose memory and time grow with the
  document: about 1 GB and most of a minute for 8 MB, so a 100 MB file without a line break would
  take many gigabytes and many minutes. Such a file is refused after reading the first
  ``MAX_DOCUMENT_BYTES + 1`` bytes of the line, with what to do instead. Records of ``.json``
  arrays and ``.parquet`` rows are held to the same bound once read (``_check_document_sizes``).
"""

from __future__ import annotations

import codecs
import json
import logging
from itertools import groupby
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tiedemb.errors import UserError, first_line
from tiedemb.training.files import out_of_space

log = logging.getLogger("tiedemb.data")

MAX_DOCUMENT_BYTES = 8 << 20
"""The longest document (line of a ``.txt`` file, record, row) read, in bytes of UTF-8."""
SCAN_CHUNK_BYTES = 1 << 20
"""How much of a file ``check_bytes`` holds at a time."""
SMALL_FILE_BYTES = 1 << 16
"""A JSON file up to this size is parsed whole to see whether it holds any record at all."""
_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SUFFIXES = tuple(_BUILDERS)
"""File name endings ``train_files`` and ``val_files`` may use."""
_LINE_FILES = (".txt", ".jsonl")
"""Files whose every line is one document (so a long line is a long document)."""


# --------------------------------------------------------------------------- the bytes of a file


def _line_ends(data: bytes, after_cr: bool) -> int:
    """Line ends in ``data`` (``\\r\\n`` counts once, also when split from a ``\\r`` just before)."""
    ends = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return ends - (after_cr and data.startswith(b"\n"))


def _first_line_end(data: bytes) -> int:
    found = [at for at in (data.find(b"\n"), data.find(b"\r")) if at >= 0]
    return min(found) if found else -1


def check_bytes(path: Path, role: str, encoding_errors: str) -> None:
    """Refuse a file that is not UTF-8 (unless ``encoding_errors="replace"``) or has an over-long line.

    Reads the file once, ``SCAN_CHUNK_BYTES`` (at most ``MAX_DOCUMENT_BYTES``) at a time, with an
    incremental decoder, so a multi-byte character split between two chunks is still decoded whole.
    """
    limit = MAX_DOCUMENT_BYTES
    lines_are_documents = path.suffix.lower() in _LINE_FILES
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    decoding = True
    offset = lines = 0  # bytes and line ends before the current chunk
    run, run_start, after_cr = 0, 0, False  # the current line: bytes so far, where it started
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(min(SCAN_CHUNK_BYTES, limit))
            if decoding:
                pending = len(decoder.getstate()[0])  # a character's first bytes, left from the last chunk
                try:
                    decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as error:
                    decoding = False
                    at = offset - pending + error.start
                    line = lines + _line_ends(chunk[: max(0, error.start - pending)], after_cr) + 1
                    _bad_byte(path, role, encoding_errors, error.object[error.start], at, line)
            if not chunk:
                return
            if lines_are_documents:
                first = _first_line_end(chunk)
                if first < 0:
                    run += len(chunk)
                else:
                    _check_line(path, role, run + first, run_start, lines + 1, limit)
                    last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
                    run, run_start = len(chunk) - last - 1, offset + last + 1
                # a line inside a chunk is shorter than the chunk, so only lines across chunks need a look
                _check_line(path, role, run, run_start, lines + _line_ends(chunk, after_cr) + 1, limit)
            lines += _line_ends(chunk, after_cr)
            after_cr = chunk.endswith(b"\r")
            offset += len(chunk)


def _bad_byte(path: Path, role: str, encoding_errors: str, byte: int, offset: int, line: int) -> None:
    where = f"byte 0x{byte:02x} at offset {offset} (line {line})"
    if encoding_errors == "strict":
        raise UserError(
            f"{role} file {str(path)!r} is not UTF-8 text: {where} is not part of a UTF-8 character. "
            "Convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8), or set "
            "data.encoding_errors=replace to read such bytes as U+FFFD"
        )
    log.warning(
        "%s file %r is not all UTF-8 text: from the %s on, bytes that are not UTF-8 are read as U+FFFD "
        "(data.encoding_errors=replace)",
        role,
        str(path),
        where,
    )


def _check_line(path: Path, role: str, length: int, start: int, line: int, limit: int) -> None:
    if length > limit:
        kind = "record" if path.suffix.lower() == ".jsonl" else "document"
        raise UserError(
            f"{role} file {str(path)!r}, line {line} (from byte offset {start}): a {kind} of more than "
            f"{limit} bytes, too long to tokenise in one piece; each line of a {path.suffix} file is one "
            "document, so break the text into lines of fewer bytes (one per paragraph, say)"
        )


def _check_document_sizes(dataset: datasets.Dataset, column: str, files: list[Path], role: str) -> None:
    """Refuse a record or row longer than ``MAX_DOCUMENT_BYTES`` (JSON arrays, parquet: read whole)."""
    values = dataset.data.column(column)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return  # numbers and the like: short by nature
    too_long = pc.greater(pc.binary_length(values), MAX_DOCUMENT_BYTES)
    row = pc.index(too_long, True).as_py()
    if row >= 0:
        path, row = _file_of_row(files, row)
        raise UserError(
            f"{role} file {str(path)!r}, row {row + 1}: a document of more than {MAX_DOCUMENT_BYTES} bytes, "
            "too long to tokenise in one piece; split it into several records"
        )


def _file_of_row(files: list[Path], row: int) -> tuple[Path, int]:
    """The file (of several read together) holding ``row``, and the row's number in it."""
    for path in files[:-1]:
        rows = pq.read_metadata(path).num_rows
        if row < rows:
            return path, row
        row -= rows
    return files[-1], row


# --------------------------------------------------------------------------- reading


def read_files(
    paths: list[Path], column: str, role: str, encoding_errors: str, work_dir: Path, num_proc: int | None
) -> datasets.Dataset:
    """All documents of ``paths`` in order, as one memory-mapped dataset with the texts in ``column``.

    The Arrow files are written under ``work_dir``, which the caller removes when done. Values
    are as stored (not yet stripped; missing ones are null).
    """
    for path in paths:
        if path.suffix.lower() == ".parquet":
            names = pq.read_schema(path).names
            if column not in names:
                raise UserError(
                    f"{str(path)!r} has no column {column!r} (columns: {', '.join(names)}); set text_column"
                )
        else:
            check_bytes(path, role, encoding_errors)
    paths = [path for path in paths if not holds_no_rows(path)]  # the builders refuse those
    if not paths:
        return datasets.Dataset.from_dict({column: []}, features=datasets.Features({column: datasets.Value("string")}))
    parts = []
    # a JSON array is read whole anyway, so it is read alone: a mistake in it is then named by file
    for (builder, _), group in groupby(
        paths, key=lambda p: (_BUILDERS[p.suffix.lower()], p.suffix.lower() == ".json" and p)
    ):
        files = list(group)
        dataset = _load(builder, files, column, role, encoding_errors, work_dir, num_proc)
        if builder == "text":
            dataset = dataset.rename_column("text", column) if column != "text" else dataset
        else:
            _check_fields(dataset, column, files)
            _check_document_sizes(dataset, column, files, role)
        parts.append(dataset.select_columns([column]))
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def holds_no_rows(path: Path) -> bool:
    """Whether a file has no document or example to give (the ``datasets`` builders refuse such a
    file rather than read none): an empty file, parquet without rows, CSV or TSV with a header alone,
    JSON holding only an empty array."""
    suffix, size = path.suffix.lower(), path.stat().st_size
    if suffix == ".parquet":
        return pq.read_metadata(path).num_rows == 0
    if suffix in (".csv", ".tsv"):
        with path.open(encoding="utf-8-sig", errors="replace") as handle:
            return sum(1 for line in handle if line.strip()) <= 1
    if size == 0 or suffix == ".txt":
        return size == 0
    return _holds_empty_json(path)


def _holds_empty_json(path: Path) -> bool:
    """Whether a JSON or JSON-lines file holds only whitespace or an empty array.

    Only a file up to ``SMALL_FILE_BYTES`` is parsed whole; a larger one holds something, and
    the ``datasets`` builder that reads it says what.
    """
    if path.stat().st_size > SMALL_FILE_BYTES:
        return False
    text = path.read_text(encoding="utf-8-sig", errors="replace").strip()
    try:
        return not text or json.loads(text) == []
    except ValueError:
        return False


def _load(
    builder: str, files: list[Path], column: str, role: str, encoding_errors: str, work_dir: Path, num_proc: int | None
) -> datasets.Dataset:
    options: dict = {}
    if builder == "text":
        # utf-8-sig drops the byte-order mark WikiText (and Windows editors) put first
        options = {"encoding": "utf-8-sig", "encoding_errors": encoding_errors}
    elif builder == "json" and encoding_errors != "strict":
        # the json builder decodes (and so replaces bytes) only for an encoding other than plain utf-8
        options = {"encoding": "utf-8-sig", "encoding_errors": encoding_errors}
    elif builder == "parquet":
        options = {"columns": [column]}
    processes = min(num_proc, len(files)) if num_proc and len(files) > 1 else None
    try:
        return datasets.load_dataset(
            builder,
            data_files=[str(path) for path in files],
            split="train",
            cache_dir=str(work_dir),
            num_proc=processes,
            **options,
        )
    except Exception as error:  # any parse failure of a user's file is reported as theirs
        if out_of_space(error) or isinstance(error, MemoryError):
            raise  # the machine's problem, not the file's (the caller reports a full disk)
        if len(files) > 1:  # find the file at fault
            for path in files:
                _load(builder, [path], column, role, encoding_errors, work_dir, None)
        cause = error.__cause__ or error
        raise UserError(f"could not read {role} file {str(files[0])!r}: {first_line(cause)}") from None


def _check_fields(dataset: datasets.Dataset, column: str, files: list[Path]) -> None:
    """The text field must exist; records without a value are skipped, and said so."""
    described = ", ".join(repr(str(path)) for path in files)
    if column not in dataset.column_names:
        found = ", ".join(dataset.column_names)
        raise UserError(
            f"no record of {described} has a {column!r} field (fields: {found}); "
            "set text_column to the field holding the text"
        )
    missing = dataset.data.column(column).null_count
    if missing:
        log.warning(
            "%d of %d records of %s have no %r value (null, or the field is absent); they are skipped",
            missing,
            len(dataset),
            described,
            column,
        )
