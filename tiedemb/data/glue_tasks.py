"""The GLUE tasks tiedemb knows: names, columns, labels, splits and classic file layouts.

One entry per task, in plain dataclasses: the classifier (``tiedemb.modules.glue``) reads label
counts, metric and file names from here without loading the hub libraries the data module needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClassicLayout:
    """Where and how one task is stored in the classic ``glue_data`` folder."""

    folder: str
    """Task folder name inside ``glue_data``, e.g. ``"MRPC"``."""
    split_files: dict[str, str] = field(hash=False)
    """Hub split name -> file name in the task folder."""
    text_columns: tuple[str, ...]
    """Header names of the text columns, in the order of the task's hub text columns."""
    label_values: tuple[str, ...]
    """Labels as written in the files, in hub id order (MRPC writes ``"0"``/``"1"``)."""
    label_column: str | None = "label"
    """Header name of the label column; ``None`` means the last field of each row, because
    MNLI files carry a different number of annotator-label columns before the gold label."""
    index_column: str = "index"
    """Header name of the example index that test files carry for submissions."""
    headerless_columns: tuple[str, ...] | None = None
    """Column names to assume when a file has no header row (CoLA's train and dev)."""
    skip_malformed: bool = False
    """Drop rows with missing fields instead of failing (QQP's train file has a few)."""


@dataclass(frozen=True)
class GlueTask:
    """What tiedemb needs to know about one GLUE classification task."""

    name: str
    text_columns: tuple[str, ...]
    label_names: tuple[str, ...]
    validation_splits: tuple[str, ...]
    test_splits: tuple[str, ...]
    submission_files: dict[str, str] = field(hash=False)
    classic: ClassicLayout = field(hash=False)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", *self.validation_splits, *self.test_splits)


def _simple_task(
    name: str,
    text_columns: tuple[str, ...],
    label_names: tuple[str, ...],
    folder: str,
    file_columns: tuple[str, ...],
    file_labels: tuple[str, ...],
    **layout: object,
) -> GlueTask:
    """A task with one validation and one test split, as all GLUE tasks but MNLI have.

    ``file_columns`` and ``file_labels`` are the text column names and label spellings of its
    classic files; ``layout`` sets the remaining ``ClassicLayout`` fields.
    """
    files = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
    classic = ClassicLayout(folder, files, file_columns, file_labels, **layout)
    return GlueTask(name, text_columns, label_names, ("validation",), ("test",), {"test": f"{folder}.tsv"}, classic)


_MNLI = GlueTask(
    name="mnli",
    text_columns=("premise", "hypothesis"),
    label_names=("entailment", "neutral", "contradiction"),
    validation_splits=("validation_matched", "validation_mismatched"),
    test_splits=("test_matched", "test_mismatched"),
    submission_files={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
    classic=ClassicLayout(
        folder="MNLI",
        split_files={
            "train": "train.tsv",
            "validation_matched": "dev_matched.tsv",
            "validation_mismatched": "dev_mismatched.tsv",
            "test_matched": "test_matched.tsv",
            "test_mismatched": "test_mismatched.tsv",
        },
        text_columns=("sentence1", "sentence2"),
        label_values=("entailment", "neutral", "contradiction"),
        label_column=None,
    ),
)

TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (
        _MNLI,
        _simple_task(
            "mrpc",
            ("sentence1", "sentence2"),
            ("not_equivalent", "equivalent"),
            folder="MRPC",
            file_columns=("#1 String", "#2 String"),
            file_labels=("0", "1"),
            label_column="Quality",
        ),
        _simple_task(
            "rte",
            ("sentence1", "sentence2"),
            ("entailment", "not_entailment"),
            folder="RTE",
            file_columns=("sentence1", "sentence2"),
            file_labels=("entailment", "not_entailment"),
        ),
        _simple_task(
            "qnli",
            ("question", "sentence"),
            ("entailment", "not_entailment"),
            folder="QNLI",
            file_columns=("question", "sentence"),
            file_labels=("entailment", "not_entailment"),
        ),
        _simple_task(
            "qqp",
            ("question1", "question2"),
            ("not_duplicate", "duplicate"),
            folder="QQP",
            file_columns=("question1", "question2"),
            file_labels=("0", "1"),
            label_column="is_duplicate",
            index_column="id",
            skip_malformed=True,
        ),
        _simple_task(
            "sst2",
            ("sentence",),
            ("negative", "positive"),
            folder="SST-2",
            file_columns=("sentence",),
            file_labels=("0", "1"),
        ),
        _simple_task(
            "cola",
            ("sentence",),
            ("unacceptable", "acceptable"),
            folder="CoLA",
            file_columns=("sentence",),
            file_labels=("0", "1"),
            headerless_columns=("source", "label", "original_label", "sentence"),
        ),
    )
}
