"""Reading GLUE splits from the classic ``glue_data`` layout (``data.data_dir``).

The classic ``glue_data/<TASK>/*.tsv`` files predate the hub copies and differ from them in
ways a loader has to know: they are tab-separated with no quoting (sentences contain bare
``"`` characters, so a CSV reader with quoting on would merge rows), some start with a UTF-8
byte-order mark, labels are written as text or digits in a named column (MNLI: the last one),
and test files carry an example index instead of a label. ``read_split`` turns one such file
into columns named as on the hub, with labels as ids in hub order, so the rest of tiedemb sees
one format whatever the source.
"""

from __future__ import annotations

from pathlib import Path

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
        header = _header(path, layout, first[1].split("\t"), labelled)
        text_at = [header.index(name) for name in layout.text_columns]
        label_at = header.index(layout.label_column) if labelled and layout.label_column is not None else None
        index_at = None if labelled else header.index(layout.index_column)
        needed = max(text_at + [i for i in (label_at, index_at) if i is not None]) + 1
        for number, line in numbered:
            fields = line.split("\t")
            if len(fields) < needed + (label_at is None and labelled):
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


def _header(path: Path, layout: ClassicLayout, fields: list[str], labelled: bool) -> list[str]:
    """Return the column names of the header row, which must hold the columns this split needs."""
    required = list(layout.text_columns)
    if labelled and layout.label_column is not None:
        required.append(layout.label_column)
    if not labelled:
        required.append(layout.index_column)
    if all(name in fields for name in required):
        return fields
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
