"""GLUE classification tasks as a LightningDataModule, from the hub or a classic ``glue_data`` folder.

Each split becomes a ``datasets.Dataset`` with the hub's text columns, ``label`` (hub order, ``-1``
unlabelled) and ``idx``, tokenised once with a batched ``map`` and padded per batch.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets
import pyarrow
import pyarrow.csv
import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from tiedemb.data.glue_tasks import TASKS, GlueTask
from tiedemb.data.preparing import from_hub, prepare_hint
from tiedemb.data.sampling import ResumableTraining
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
    """One GLUE task, tokenised for a sentence(-pair) classifier; ``num_labels``, ``vocab_size`` and
    ``pad_token_id`` are known on construction, for the CLI to link into the model. Test scores the
    dev splits again (GLUE hides test labels); predict runs over the test splits."""

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

    def prepare_data(self) -> None:  # hub data downloaded once per machine
        if self.task_dir is None:
            self._load_hub()

    def setup(self, stage: str | None = None) -> None:
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
        return self._conform(self._load_hub()[split], split)

    def split_dataset(self, split: str) -> datasets.Dataset:
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
            lengths = _lengths(dataset)  # longest first, ties in index order: less padding, the same figures
            dataset = dataset.select(sorted(range(len(lengths)), key=lambda index: -lengths[index]))
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            generator=torch.Generator().manual_seed(seed),  # leaves the global generator alone
            collate_fn=DataCollatorWithPadding(self.tokenizer),
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def _path(self, split: str) -> Path:
        return self.task_dir / self.task_spec.classic.split_files[split]

    def _present(self, splits: tuple[str, ...]) -> list[str]:
        return list(splits) if self.task_dir is None else [split for split in splits if self._path(split).is_file()]

    def _load_hub(self) -> datasets.DatasetDict:
        if self._hub_splits is None:  # offline: from the local cache only, within seconds
            name, task = self.hparams.hub_dataset, self.task_spec.name
            advice = ". Pass data_dir (a classic glue_data folder) instead."
            self._hub_splits = from_hub(f"GLUE {task} ({name!r})", lambda: datasets.load_dataset(name, task), advice)
        return self._hub_splits

    def _conform(self, dataset: datasets.Dataset, split: str) -> datasets.Dataset:
        """A hub split reduced to the text columns, ``label`` ids and ``idx``, still backed by the hub's
        Arrow files, so its tokenised copy is cached on disk."""
        task = self.task_spec
        labelled = split not in task.test_splits
        dataset = dataset.select_columns([*task.text_columns, *(["label"] if labelled else []), "idx"])
        return dataset if labelled else dataset.add_column("label", [UNLABELED] * len(dataset))


def _lengths(dataset: datasets.Dataset) -> list[int]:  # tokens per example, before padding
    return [len(ids) for ids in dataset["input_ids"]] if len(dataset) else []


def find_task_dir(data_dir: str | Path, task: GlueTask) -> Path:
    """The task folder, given either ``glue_data`` itself or its task subfolder."""
    layout, root = task.classic, Path(data_dir).expanduser()
    nested = root / layout.folder
    if nested.is_dir():
        return nested
    if any((root / name).is_file() for name in layout.split_files.values()):
        return root
    files = ", ".join(sorted(set(layout.split_files.values())))
    raise UserError(
        f"data_dir {str(root)!r} does not exist or holds no {layout.folder} data: expected the folder "
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
    types = dict.fromkeys(columns, pyarrow.string()) | ({} if labelled else {key: pyarrow.int64()})
    convert = pyarrow.csv.ConvertOptions(include_columns=columns, column_types=types, strings_can_be_null=False)
    try:
        table = pyarrow.csv.read_csv(path, parse_options=parse, convert_options=convert)
    except pyarrow.ArrowException as error:  # a missing column, a short row, an empty file, bytes not UTF-8
        raise UserError(f"{path}: {first_line(error)}; is this {layout.folder}'s {split} file?") from None
    if not table.num_rows:
        raise UserError(f"{path}: the {split} file has a header but no examples")
    texts = {hub: table.column(classic).to_pylist() for classic, hub in zip(layout.text_columns, task.text_columns)}
    if not labelled:  # the example index, which submission files echo
        return datasets.Dataset.from_dict(
            texts | {"label": [UNLABELED] * table.num_rows, "idx": table.column(key).to_pylist()}
        )
    values = [value.strip() for value in table.column(key).to_pylist()]
    label_ids = {value: number for number, value in enumerate(layout.label_values)}
    row = next((row for row, value in enumerate(values) if value not in label_ids), None)
    if row is not None:
        raise UserError(
            f"{path}, row {row + 1}: label {values[row]!r} is not a {layout.folder} label "
            f"(expected one of {', '.join(layout.label_values)})"
        )
    return datasets.Dataset.from_dict(
        texts | {"label": [label_ids[value] for value in values], "idx": list(range(len(values)))}
    )
