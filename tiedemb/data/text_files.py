"""Local text files for pretraining: one document a line, read by ``datasets``' own ``text`` builder.

A ``.txt`` file holds one document per line (a leading byte-order mark is dropped; ``\\n``,
``\\r\\n`` and ``\\r`` end lines). Each file is read by ``datasets.load_dataset("text")`` into
Arrow files under a working folder, so a corpus larger than memory is never held in Python lists.
JSON lines and parquet files are read as a dataset instead: ``data.dataset`` takes a local folder
of them, which ``datasets`` loads with its own builders.

Two mistakes are refused in one line, naming the file:

* bytes that are not UTF-8: once the builder fails, the file is read again a line at a time to
  name the byte offset and line of the first such byte (``_first_bad_byte``);
* a document longer than ``MAX_DOCUMENT_BYTES``. Tokenising one document is one call of the
  tokenizer, whose memory and time grow with the document: about 1 GB and most of a minute for
  8 MB, so a 100 MB file without a line break would take many gigabytes and many minutes. Such a
  file is refused once read, before anything is tokenised.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pyarrow.compute as pc

from tiedemb.errors import UserError, first_line
from tiedemb.training.files import out_of_space

MAX_DOCUMENT_BYTES = 8 << 20
"""The longest document (line of a ``.txt`` file) read, in bytes of UTF-8."""
SUFFIXES = (".txt",)
"""File name endings ``train_files`` and ``val_files`` may use."""


def read_files(paths: list[Path], role: str, work_dir: Path) -> datasets.Dataset:
    """All lines of ``paths`` in order, as one memory-mapped dataset with a ``text`` column.

    The Arrow files are written under ``work_dir``, which the caller removes when done. Lines are
    as stored (not yet stripped; blank ones included).
    """
    parts = [
        _read_file(path, role, work_dir) for path in paths if path.stat().st_size
    ]  # the builder refuses empty files
    if not parts:
        return datasets.Dataset.from_dict({"text": []}, features=datasets.Features({"text": datasets.Value("string")}))
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def _read_file(path: Path, role: str, work_dir: Path) -> datasets.Dataset:
    try:
        # utf-8-sig drops the byte-order mark WikiText (and Windows editors) put first
        lines = datasets.load_dataset(
            "text", data_files=[str(path)], split="train", cache_dir=str(work_dir), encoding="utf-8-sig"
        )
    except Exception as error:  # any failure to read a user's file is reported as theirs
        if out_of_space(error) or isinstance(error, MemoryError):
            raise  # the machine's problem, not the file's (the caller reports a full disk)
        _first_bad_byte(path, role)
        raise UserError(f"could not read {role} file {str(path)!r}: {first_line(error.__cause__ or error)}") from None
    too_long = pc.index(pc.greater(pc.binary_length(lines.data.column("text")), MAX_DOCUMENT_BYTES), True).as_py()
    if too_long >= 0:
        raise UserError(
            f"{role} file {str(path)!r}, line {too_long + 1}: a document of more than {MAX_DOCUMENT_BYTES} bytes, "
            "too long to tokenise in one piece; each line of a .txt file is one document, so break the text "
            "into lines of fewer bytes (one per paragraph, say)"
        )
    return lines


def _first_bad_byte(path: Path, role: str) -> None:
    """Refuse ``path`` if it is not UTF-8, naming the byte offset and line of its first bad byte.

    Reads the file a ``\\n``-ended piece at a time (a UTF-8 character never spans one), counting a
    lone ``\\r`` as a line end too, as the ``text`` builder does.
    """
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
