"""Reading GLUE splits from local files: the classic ``glue_data`` layout or hub-format files.

The classic ``glue_data/<TASK>/*.tsv`` files predate the hub copies and differ from them in
ways a loader has to know: they are tab-separated with no quoting (sentences contain bare
``"`` characters, so a CSV reader with quoting on would merge rows), some start with a UTF-8
byte-order mark, labels are written as text or digits in a named column (MNLI: the last one),
test files carry an example index instead of a label, and CoLA's train and dev files have no
header row at all. ``read_split`` turns one such file into columns named as on the hub, with
labels as ids in hub order, so the rest of tiedemb sees one format whatever the source. Files
that already use the hub's columns, and hub splits themselves, are checked and trimmed to
that format by ``conform``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable
from itertools import chain
from pathlib import Path

import datasets

from tiedemb.data.catalog import prepare_hint
from tiedemb.data.glue_tasks import ClassicLayout
from tiedemb.errors import UserError

UNLABELED = -1
"""Label id of an example without a label (test splits), as on the hub."""


def find_task_dir(data_dir: str | Path, layout: ClassicLayout) -> Path:
    """Return the task folder, accepting either ``glue_data`` itself or its task subfolder."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise UserError(
            f"data_dir {str(root)!r} does not exist or is not a directory{prepare_hint(root / layout.folder)}"
        )
    nested = root / layout.folder
    if nested.is_dir():
        return nested
    if any((root / name).is_file() for name in layout.split_files.values()):
        return root
    files = ", ".join(sorted(set(layout.split_files.values())))
    raise UserError(
        f"data_dir {str(root)!r} holds no {layout.folder} data: expected the folder "
        f"{str(nested)!r} or the task files ({files}) directly in it{prepare_hint(nested)}"
    )


def read_split(
    path: Path, layout: ClassicLayout, split: str, text_names: tuple[str, ...], labelled: bool
) -> dict[str, list]:
    """Read one classic file into hub-named columns: the text columns, ``label`` and ``idx``.

    Labels become ids in hub order (``-1`` for unlabeled splits); ``idx`` is the file's
    example index for unlabeled splits, which submission files must echo, and the row number
    otherwise, as on the hub. Mistakes in the file are reported with its path and line number.
    """
    if not path.is_file():
        raise UserError(
            f"expected the {split} file of {layout.folder} at {str(path)!r}, but it does not exist{prepare_hint(path)}"
        )
    label_ids = {value: number for number, value in enumerate(layout.label_values)}
    texts: list[list[str]] = [[] for _ in text_names]
    labels: list[int] = []
    indices: list[int] = []
    # newline="\n": only real line ends split rows; utf-8-sig drops a leading byte-order mark.
    with path.open(encoding="utf-8-sig", newline="\n") as handle:
        lines = (line.rstrip("\r\n") for line in handle)
        numbered = ((number, line) for number, line in enumerate(lines, start=1) if line.strip())
        first = next(numbered, None)
        if first is None:
            raise UserError(f"{path}: the {split} file is empty")
        header, first_is_data = _header(path, layout, first[1].split("\t"), labelled)
        text_at = [header.index(name) for name in layout.text_columns]
        label_at = header.index(layout.label_column) if labelled and layout.label_column is not None else None
        index_at = None if labelled else header.index(layout.index_column)
        needed = max(text_at + [i for i in (label_at, index_at) if i is not None]) + 1
        rows = chain([first], numbered) if first_is_data else numbered
        for number, line in rows:
            fields = line.split("\t")
            if len(fields) < needed + (label_at is None and labelled):
                if layout.skip_malformed:
                    continue
                raise UserError(f"{path}, line {number}: {len(fields)} tab-separated fields, expected {len(header)}")
            for column, at in zip(texts, text_at):
                column.append(fields[at])
            if labelled:
                value = fields[-1 if label_at is None else label_at].strip()
                if value not in label_ids:
                    raise UserError(
                        f"{path}, line {number}: label {value!r} is not a {layout.folder} label "
                        f"(expected one of {', '.join(layout.label_values)})"
                    )
                labels.append(label_ids[value])
                indices.append(len(indices))
            else:
                labels.append(UNLABELED)
                indices.append(_index(path, number, fields[index_at]))
    if not labels:
        raise UserError(f"{path}: the {split} file has a header but no examples")
    return dict(zip(text_names, texts)) | {"label": labels, "idx": indices}


def _header(path: Path, layout: ClassicLayout, fields: list[str], labelled: bool) -> tuple[list[str], bool]:
    """Return the column names and whether the first line is already data (no header row)."""
    required = list(layout.text_columns)
    if labelled and layout.label_column is not None:
        required.append(layout.label_column)
    if not labelled:
        required.append(layout.index_column)
    if all(name in fields for name in required):
        return fields, False
    if layout.headerless_columns is not None and len(fields) == len(layout.headerless_columns):
        return list(layout.headerless_columns), True
    missing = ", ".join(name for name in required if name not in fields)
    raise UserError(
        f"{path}: the header lacks the column(s) {missing} that {layout.folder} files have "
        f"(found: {', '.join(fields)}); is this the right task's file?"
    )


def _index(path: Path, number: int, text: str) -> int:
    """Parse a test file's example index, which must be an integer for submission files."""
    try:
        return int(text)
    except ValueError:
        raise UserError(f"{path}, line {number}: example index {text!r} is not an integer") from None


RowName = Callable[[int], str]
"""Names row ``i`` (0-based) of a file in error messages, as a line number where there is one."""

_HUB_FORMAT_READERS: dict[str, tuple[str, dict, RowName]] = {
    ".parquet": ("parquet", {}, lambda row: f"row {row + 1}"),
    ".jsonl": ("json", {}, lambda row: f"line {row + 1}"),
    ".json": ("json", {}, lambda row: f"record {row + 1}"),
    ".csv": ("csv", {"keep_default_na": False}, lambda row: f"line {row + 2}"),
    ".tsv": (
        "csv",
        {"delimiter": "\t", "quoting": csv.QUOTE_NONE, "keep_default_na": False},
        lambda row: f"line {row + 2}",
    ),
}
FILE_TYPES = tuple(_HUB_FORMAT_READERS)
"""File name endings ``data_files`` may use."""


def read_hub_format(path: Path, split: str) -> tuple[datasets.Dataset, RowName]:
    """Read one file with hub column names, and how to name its rows in messages.

    TSV is read without quoting, as GLUE sentences contain bare ``"``; CSV and TSV keep
    ``NA``-like text as text.
    """
    builder, options, row_name = _HUB_FORMAT_READERS[path.suffix.lower()]
    with path.open("rb") as handle:
        if not handle.read(4096).strip():
            raise UserError(f"{path}: the {split} file is empty")
    if builder != "csv" and holds_no_rows(path):  # cheap to tell, and datasets would log an error first
        raise UserError(f"{path}: the {split} split has no examples")
    try:
        dataset = datasets.load_dataset(builder, data_files=str(path), split="train", **options)
    except Exception as error:  # any parse failure of a user's file is reported as theirs
        if holds_no_rows(path):
            raise UserError(f"{path}: the {split} split has no examples") from None
        raise UserError(f"could not read the {split} file {str(path)!r}: {type(error).__name__}: {error}") from None
    return dataset, row_name


def holds_no_rows(path: Path) -> bool:
    """Whether a file has no example to give (the ``datasets`` builders refuse such a file rather than
    read none): an empty file, parquet without rows, CSV or TSV with a header alone, JSON holding only
    an empty array (parsed only up to 64 kB: a larger one holds something, and its builder says what)."""
    suffix, size = path.suffix.lower(), path.stat().st_size
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_metadata(path).num_rows == 0
    if suffix in (".csv", ".tsv"):
        with path.open(encoding="utf-8-sig", errors="replace") as handle:
            return sum(1 for line in handle if line.strip()) <= 1
    if size == 0 or size > 1 << 16:
        return size == 0
    text = path.read_text(encoding="utf-8-sig", errors="replace").strip()
    try:
        return not text or json.loads(text) == []
    except ValueError:
        return False


def conform(
    dataset: datasets.Dataset,
    text_columns: tuple[str, ...],
    label_names: tuple[str, ...],
    split: str,
    labelled: bool,
    origin: str,
    where: RowName,
) -> datasets.Dataset:
    """Check a hub-format split and reduce it to the text columns, ``label`` ids and ``idx``.

    Labels may be ids or label names; unlabeled splits get ``-1``; a missing ``idx`` becomes the
    row number. The result stays backed by the same Arrow files where possible, so its tokenised
    copy can be cached on disk.
    """
    columns = dataset.column_names
    required = list(text_columns) + (["label"] if labelled else [])
    missing = [column for column in required if column not in columns]
    if missing:
        raise UserError(
            f"{origin}: the {split} split lacks the column(s) {', '.join(missing)} "
            f"(found: {', '.join(columns) or 'none'})"
        )
    if len(dataset) == 0:
        raise UserError(f"{origin}: the {split} split has no examples")
    dataset = dataset.select_columns([column for column in (*required, "idx") if column in columns])
    if labelled:
        labels = _label_ids(dataset["label"], label_names, origin, where)
    else:
        labels = [UNLABELED] * len(dataset)
    if labels is not None:
        dataset = dataset.remove_columns([column for column in ("label",) if column in dataset.column_names])
        dataset = dataset.add_column("label", labels)
    if "idx" not in columns:
        dataset = dataset.add_column("idx", list(range(len(dataset))))
    for column in text_columns:  # a CSV column of numbers or blanks is not read as text
        if dataset.features[column] != datasets.Value("string"):
            dataset = dataset.cast_column(column, datasets.Value("string"))
    return dataset


def _label_ids(values: Iterable[object], label_names: tuple[str, ...], origin: str, where: RowName) -> list[int] | None:
    """Check labels (ids or names); return them as ids in hub order, or ``None`` if they are ids already."""
    by_name = {name: number for number, name in enumerate(label_names)}
    ids, renamed = [], False
    for row, value in enumerate(values):
        number = by_name.get(value) if isinstance(value, str) else value
        if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < len(label_names):
            raise UserError(
                f"{origin}, {where(row)}: label {value!r} is not valid (expected an id "
                f"0-{len(label_names) - 1} or one of the names {', '.join(label_names)})"
            )
        ids.append(number)
        renamed = renamed or isinstance(value, str)
    return ids if renamed else None
