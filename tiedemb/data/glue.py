"""GLUE classification tasks as a LightningDataModule, from the hub or a classic ``glue_data`` folder.

Each split becomes a ``datasets.Dataset`` with the hub's text columns, ``label`` (hub order, ``-1``
unlabelled) and ``idx``, tokenised once with a batched ``map`` and padded per batch. The classic
files are tab-separated with no quoting (sentences hold bare ``"``), may start with a byte-order
mark, and test files carry an example index instead of a label.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets
import pyarrow
import pyarrow.csv
from lightning import LightningDataModule
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from tiedemb.data.catalog import prepare_hint
from tiedemb.data.glue_tasks import TASKS, GlueTask
from tiedemb.data.preparing import from_hub
from tiedemb.data.sampling import ResumableTraining, loader_generator, longest_first
from tiedemb.data.tokenizers import load_tokenizer
from tiedemb.errors import UserError, check_choice, first_line
from tiedemb.options import (
    NonNegativeInt,
    PositiveInt,
    at_least,
    changed_from_default,
    no_effect,
)

HUB_DATASET = "nyu-mll/glue"
MIN_MAX_LENGTH = 8  # a pair needs [CLS] a [SEP] b [SEP] and some words
UNLABELED = -1  # the label id of a test example, as on the hub


class GlueData(ResumableTraining, LightningDataModule):
    """One GLUE task, tokenised for a sentence(-pair) classifier.

    ``num_labels``, ``vocab_size``, ``pad_token_id`` and the split names are known right after
    construction, so the CLI links them into the model. The test loaders score the dev splits again
    (GLUE hides test labels); the predict loaders run over the test splits, for submission files.
    """

    def __init__(
        self,
        task: str = "mrpc",
        tokenizer: str = "bert-base-uncased",
        data_dir: str | None = None,
        max_length: at_least(MIN_MAX_LENGTH) = 128,
        batch_size: PositiveInt = 32,
        eval_batch_size: PositiveInt | None = None,
        num_workers: NonNegativeInt = 0,
        pin_memory: bool = False,
        hub_dataset: str = HUB_DATASET,
        max_train_samples: PositiveInt | None = None,
        length_grouping: NonNegativeInt = 0,
        sort_eval_by_length: bool = False,
    ) -> None:
        """
        Args:
            task: the GLUE task: mrpc or mnli (``tiedemb.data.glue_tasks``).
            tokenizer: a tokenizer folder or hub name; ``pretrained``: model.pretrained's.
            data_dir: a classic glue_data folder (the task's TSV files). Unset: the hub.
            max_length: tokens per example; longer pairs are cut.
            batch_size: examples per training batch.
            eval_batch_size: examples per evaluation batch. Unset: batch_size.
            num_workers: DataLoader worker processes.
            pin_memory: the DataLoader's page-locked batches (faster copies to a GPU).
            hub_dataset: the hub dataset read without data_dir.
            max_train_samples: train on the first this many examples only.
            length_grouping: batch training examples of similar length, sorting windows of this many
                batches (0: uniform batches).
            sort_eval_by_length: read evaluation and prediction splits longest first (faster; same figures).
        """
        if changed_from_default(hub_dataset, HUB_DATASET) and data_dir is not None:
            raise no_effect(
                "data.hub_dataset", hub_dataset, "with data.data_dir, which is read instead; give one source"
            )
        if tokenizer == "pretrained":
            raise UserError(
                "data.tokenizer='pretrained' is resolved by the command line from model.pretrained; "
                "outside it, pass the tokenizer itself"
            )
        super().__init__()
        self.save_hyperparameters()
        self.task_spec: GlueTask = TASKS[check_choice("data.task", task, TASKS)]
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.tokenizer: PreTrainedTokenizerBase = load_tokenizer(tokenizer)
        if self.tokenizer.pad_token_id is None:
            raise UserError(f"tokenizer {tokenizer!r} has no padding token, which batching GLUE pairs needs")
        self.num_labels = self.task_spec.num_labels
        self.vocab_size = len(self.tokenizer)
        self.pad_token_id: int = self.tokenizer.pad_token_id
        self.task_dir = find_task_dir(data_dir, self.task_spec) if data_dir is not None else None
        self.val_split_names: list[str] = self._present(self.task_spec.validation_splits)
        self.predict_split_names: list[str] = self._present(self.task_spec.test_splits)
        self._hub_splits: datasets.DatasetDict | None = None
        self._encoded: dict[str, datasets.Dataset] = {}

    def prepare_data(self) -> None:
        """Download hub data once per machine; a local folder needs nothing."""
        if self.task_dir is None:
            self._load_hub()

    def setup(self, stage: str | None = None) -> None:
        """Read and tokenise the splits ``stage`` needs, each once."""
        for kind, expected, needed in (
            ("validation", self.task_spec.validation_splits, stage in ("fit", "validate", "test")),
            ("test", self.task_spec.test_splits, stage == "predict"),
        ):
            if needed and not self._present(expected):
                where = " or ".join(repr(str(self._path(split))) for split in expected)
                raise UserError(f"no {kind} split of {self.task_spec.name} found; expected {where}")
        train = ["train"] if stage in ("fit", None) else []
        evaluated = self.val_split_names if stage != "predict" else []
        predicted = self.predict_split_names if stage in ("predict", None) else []
        for split in train + evaluated + predicted:
            self.split_dataset(split)

    def raw_split(self, split: str) -> datasets.Dataset:
        """One split as read, untokenised: its text columns, ``label`` and ``idx``."""
        if self.task_dir is not None:
            return read_split(self._path(split), self.task_spec, split)
        splits = self._load_hub()
        if split not in splits:
            name = self.hparams.hub_dataset
            raise UserError(
                f"hub dataset {name!r} ({self.task_spec.name}) has no split {split!r}; it has {', '.join(splits)}"
            )
        return self._conform(splits[split], split)

    def split_dataset(self, split: str) -> datasets.Dataset:
        """The tokenised examples of one split (hub name), prepared on first use."""
        if split not in self._encoded:
            raw = self.raw_split(split)
            if split == "train" and self.hparams.max_train_samples is not None:
                raw = raw.select(range(min(self.hparams.max_train_samples, len(raw))))
            tokenizer, columns, max_length = self.tokenizer, self.task_spec.text_columns, self.max_length

            def encode(batch: dict[str, list]) -> dict[str, list]:  # unpadded: the collator pads per batch
                texts = (batch[column] for column in columns)
                encoded = tokenizer(
                    *texts, truncation="longest_first", max_length=max_length, return_token_type_ids=True
                )
                return {**encoded, "labels": batch["label"], "idx": batch["idx"]}

            description = f"Tokenising {self.task_spec.name} {split}"
            self._encoded[split] = raw.map(encode, batched=True, remove_columns=raw.column_names, desc=description)
        return self._encoded[split]

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(split, self.eval_batch_size) for split in self.val_split_names]

    def test_dataloader(self) -> list[DataLoader]:
        return self.val_dataloader()

    def predict_dataloader(self) -> list[DataLoader]:
        return [self._loader(split, self.eval_batch_size) for split in self.predict_split_names]

    def _loader(self, split: str, batch_size: int, shuffle: bool = False) -> DataLoader:
        dataset = self.split_dataset(split)
        # the run's seed_everything (PL_GLOBAL_SEED) decides the order, the same on every process
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        sampler = None
        if shuffle:
            window = self.hparams.length_grouping
            lengths = _lengths(dataset) if window else ()
            sampler = self.resumable_sampler(
                dataset, batch_size=batch_size, seed=seed, keyed=False, lengths=lengths, window=window
            )
        elif self.hparams.sort_eval_by_length:
            dataset = dataset.select(longest_first(_lengths(dataset)))
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            generator=loader_generator(seed),
            collate_fn=DataCollatorWithPadding(self.tokenizer),
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def _path(self, split: str) -> Path:
        return self.task_dir / self.task_spec.classic.split_files[split]

    def _present(self, splits: tuple[str, ...]) -> list[str]:
        """The splits there are: every one on the hub, the files there in a folder."""
        return list(splits) if self.task_dir is None else [split for split in splits if self._path(split).is_file()]

    def _load_hub(self) -> datasets.DatasetDict:
        if self._hub_splits is None:  # offline: from the local cache only, within seconds
            name, task = self.hparams.hub_dataset, self.task_spec.name
            advice = ". Pass data_dir (a classic glue_data folder) instead."
            self._hub_splits = from_hub(f"GLUE {task} ({name!r})", lambda: datasets.load_dataset(name, task), advice)
        return self._hub_splits

    def _conform(self, dataset: datasets.Dataset, split: str) -> datasets.Dataset:
        """A hub split reduced to the text columns, ``label`` ids and ``idx`` (the row number if missing),
        still backed by the hub's Arrow files, so its tokenised copy is cached on disk."""
        task, origin = self.task_spec, f"{self.hparams.hub_dataset}/{self.task_spec.name}"
        labelled = split not in task.test_splits
        required = [*task.text_columns, *(["label"] if labelled else [])]
        missing = [column for column in required if column not in dataset.column_names]
        if missing:
            raise UserError(
                f"{origin}: the {split} split lacks the column(s) {', '.join(missing)} "
                f"(found: {', '.join(dataset.column_names) or 'none'})"
            )
        dataset = dataset.select_columns([column for column in (*required, "idx") if column in dataset.column_names])
        if labelled:
            for row, label in enumerate(dataset["label"]):
                if not isinstance(label, int) or not 0 <= label < task.num_labels:
                    expected = f"expected an id 0-{task.num_labels - 1}"
                    raise UserError(f"{origin}, row {row + 1}: label {label!r} is not valid ({expected})")
        else:
            dataset = dataset.add_column("label", [UNLABELED] * len(dataset))
        if "idx" not in dataset.column_names:
            dataset = dataset.add_column("idx", list(range(len(dataset))))
        return dataset


def _lengths(dataset: datasets.Dataset) -> list[int]:  # tokens per example, before padding
    return [len(ids) for ids in dataset["input_ids"]] if len(dataset) else []


def find_task_dir(data_dir: str | Path, task: GlueTask) -> Path:
    """The task folder, given either ``glue_data`` itself or its task subfolder."""
    layout, root = task.classic, Path(data_dir).expanduser()
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


def read_split(path: Path, task: GlueTask, split: str) -> datasets.Dataset:
    """One classic file as hub-named columns: the text columns, ``label`` (hub ids) and ``idx`` (a test
    file's example index, which submission files echo; else the row number)."""
    layout, labelled = task.classic, split not in task.test_splits
    if not path.is_file():
        raise UserError(
            f"expected the {split} file of {layout.folder} at {str(path)!r}, but it does not exist{prepare_hint(path)}"
        )
    key = layout.label_column if labelled else layout.index_column
    columns = [*layout.text_columns, key]
    # No quoting: sentences hold bare ". Arrow's reader skips the byte-order mark and blank lines.
    parse = pyarrow.csv.ParseOptions(delimiter="\t", quote_char=False)
    convert = pyarrow.csv.ConvertOptions(
        include_columns=columns, column_types=dict.fromkeys(columns, pyarrow.string()), strings_can_be_null=False
    )
    try:
        table = pyarrow.csv.read_csv(path, parse_options=parse, convert_options=convert)
    except pyarrow.ArrowException as error:  # a missing column, a short row, an empty file, bytes not UTF-8
        raise UserError(f"{path}: {first_line(error)}; is this {layout.folder}'s {split} file?") from None
    if not table.num_rows:
        raise UserError(f"{path}: the {split} file has a header but no examples")
    values = [value.strip() for value in table.column(key).to_pylist()]
    label_ids = {value: number for number, value in enumerate(layout.label_values)}
    valid = (lambda value: value in label_ids) if labelled else (lambda value: value.lstrip("-").isdigit())
    row = next((row for row, value in enumerate(values) if not valid(value)), None)
    if row is not None and labelled:
        raise UserError(
            f"{path}, row {row + 1}: label {values[row]!r} is not a {layout.folder} label "
            f"(expected one of {', '.join(layout.label_values)})"
        )
    if row is not None:
        raise UserError(f"{path}, row {row + 1}: example index {values[row]!r} is not an integer")
    texts = {hub: table.column(classic).to_pylist() for classic, hub in zip(layout.text_columns, task.text_columns)}
    if labelled:
        return datasets.Dataset.from_dict(
            texts | {"label": [label_ids[value] for value in values], "idx": list(range(len(values)))}
        )
    return datasets.Dataset.from_dict(
        texts | {"label": [UNLABELED] * len(values), "idx": [int(value) for value in values]}
    )
