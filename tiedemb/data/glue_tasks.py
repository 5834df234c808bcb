"""The GLUE tasks tiedemb knows (MRPC and MNLI), in plain dataclasses free of the hub libraries."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClassicLayout:
    """Where and how one task is stored in the classic ``glue_data`` folder."""

    folder: str  # the task folder in glue_data, e.g. "MRPC"
    split_files: dict[str, str] = field(hash=False)  # hub split name -> file name in the task folder
    text_columns: tuple[str, ...]  # header names of the text columns, in the order of the hub's
    label_values: tuple[str, ...]  # labels as written in the files, in hub id order (MRPC: "0"/"1")
    label_column: str  # the label column's header name
    index_column: str = "index"  # the example index test files carry for submissions


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
        label_column="gold_label",
    ),
)

_MRPC = GlueTask(
    name="mrpc",
    text_columns=("sentence1", "sentence2"),
    label_names=("not_equivalent", "equivalent"),
    validation_splits=("validation",),
    test_splits=("test",),
    submission_files={"test": "MRPC.tsv"},
    classic=ClassicLayout(
        folder="MRPC",
        split_files={"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"},
        text_columns=("#1 String", "#2 String"),
        label_values=("0", "1"),
        label_column="Quality",
    ),
)

TASKS: dict[str, GlueTask] = {task.name: task for task in (_MNLI, _MRPC)}
