"""GLUE classification tasks as a LightningDataModule.

Everything task-specific lives in one table, ``TASKS`` (``tiedemb.data.glue_tasks``: MRPC and
MNLI). The data comes from ``data_dir`` (the classic ``glue_data`` folder) if it is given, else
from the hub. Whatever the source, each split becomes a ``datasets.Dataset`` with the hub's text
columns, ``label`` (hub label order, ``-1`` when unlabeled) and ``idx``, is tokenised once with a
batched ``map`` and is padded per batch, so short batches stay short.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Annotated

import datasets
from lightning import LightningDataModule
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from tiedemb.data.glue_files import UNLABELED, find_task_dir, read_split
from tiedemb.data.glue_tasks import TASKS, GlueTask
from tiedemb.data.length_grouping import length_grouped, longest_first
from tiedemb.data.sampling import ResumableTraining, loader_generator
from tiedemb.data.tokenizers import load_tokenizer
from tiedemb.errors import UserError, check_choice
from tiedemb.options import (
    Bounds,
    NonNegativeInt,
    PositiveInt,
    changed_from_default,
    check_arguments,
    no_effect,
    option_types,
)
from tiedemb.training.hub import hub_offline_requested, hub_problem

HUB_DATASET = "nyu-mll/glue"
"""Where GLUE comes from when no local source is given."""
MIN_MAX_LENGTH = 8
"""Shortest useful ``max_length``: a pair needs ``[CLS] a [SEP] b [SEP]`` and some words."""


class GlueData(ResumableTraining, LightningDataModule):
    """One GLUE task, tokenised for a sentence(-pair) classifier.

    ``tokenizer`` is a hub name or a local folder; on the command line ``pretrained`` means the
    tokenizer ``model.pretrained`` was trained with (``tiedemb.cli.resolve_pretrained_tokenizer``).

    ``num_labels``, ``vocab_size``, ``pad_token_id`` and the split names are known right after
    construction, so the CLI can link them into the model before any data is read. The test
    loaders score the labelled dev splits again (GLUE hides test labels); the predict loaders
    run over the unlabeled test splits, for submission files.

    Padding is per batch, so time goes with the longest example of each batch. Two options cut it
    (``tiedemb.data.length_grouping``): ``length_grouping`` > 0 groups training examples of similar
    length into batches, sorting windows of that many batches (50 is a good value; 0, the default,
    draws batches uniformly: grouping changes which examples share a batch, hence the results);
    ``sort_eval_by_length`` reads the evaluation and prediction splits longest first, which leaves
    metrics and prediction files as they are (rows are written by example index).
    """

    def __init__(
        self,
        task: str = "mrpc",
        tokenizer: str = "bert-base-uncased",
        data_dir: str | None = None,
        max_length: Annotated[int, Bounds(MIN_MAX_LENGTH)] = 128,
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
        check_arguments("data", option_types(GlueData.__init__), locals())
        if changed_from_default(hub_dataset, HUB_DATASET) and data_dir is not None:
            # the folder is read: a hub dataset given too would be ignored without a word
            raise no_effect(
                "data.hub_dataset", hub_dataset, "with data.data_dir, which is read instead; give one source"
            )
        super().__init__()
        self.save_hyperparameters()
        self.task_spec = TASKS[check_choice("data.task", task, TASKS)]
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.max_train_samples = max_train_samples
        self.length_grouping = length_grouping
        self.sort_eval_by_length = sort_eval_by_length
        if tokenizer == "pretrained":
            raise UserError(
                "data.tokenizer='pretrained' is resolved by the command line from model.pretrained; "
                "outside it, pass the tokenizer itself"
            )
        self.tokenizer: PreTrainedTokenizerBase = load_tokenizer(tokenizer)
        if self.tokenizer.pad_token_id is None:
            raise UserError(f"tokenizer {tokenizer!r} has no padding token, which batching GLUE pairs needs")
        self.num_labels = self.task_spec.num_labels
        self.vocab_size = len(self.tokenizer)
        self.pad_token_id: int = self.tokenizer.pad_token_id
        if data_dir is not None:
            self._source: _ClassicSource | _HubSource = _ClassicSource(self.task_spec, data_dir)
        else:
            self._source = _HubSource(self.task_spec, hub_dataset)
        self.val_split_names: list[str] = self._source.present(self.task_spec.validation_splits)
        self.predict_split_names: list[str] = self._source.present(self.task_spec.test_splits)
        self._collate = DataCollatorWithPadding(self.tokenizer)
        self._encoded: dict[str, datasets.Dataset] = {}

    def prepare_data(self) -> None:
        """Download hub data once per machine; local sources need nothing."""
        self._source.prepare()

    def setup(self, stage: str | None = None) -> None:
        """Read and tokenise the splits ``stage`` needs, each once."""
        for split in self._splits_for(stage):
            self.split_dataset(split)

    def raw_split(self, split: str) -> datasets.Dataset:
        """One split as read, untokenised: its text columns, ``label`` and ``idx``."""
        return self._source.load(split)

    def split_dataset(self, split: str) -> datasets.Dataset:
        """The tokenised examples of one split (hub name), prepared on first use."""
        if split not in self._encoded:
            raw = self._source.load(split)
            if split == "train" and self.max_train_samples is not None:
                raw = raw.select(range(min(self.max_train_samples, len(raw))))
            self._encoded[split] = self._tokenise(raw, split)
        return self._encoded[split]

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size, shuffle=True)

    def split_loader(self, split: str) -> DataLoader:
        """One split's examples in a fixed order, for a pass that reads a split but does not train on its order."""
        return self._loader(split, self.batch_size)

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(split, self.eval_batch_size) for split in self.val_split_names]

    def test_dataloader(self) -> list[DataLoader]:
        return self.val_dataloader()

    def predict_dataloader(self) -> list[DataLoader]:
        return [self._loader(split, self.eval_batch_size) for split in self.predict_split_names]

    def _splits_for(self, stage: str | None) -> list[str]:
        """Splits a stage reads; a stage with nothing to read is a configuration mistake."""
        if stage in ("fit", "validate", "test") and not self.val_split_names:
            raise UserError(
                f"no validation split of {self.task_spec.name} found; "
                f"expected {self._source.expected(self.task_spec.validation_splits)}"
            )
        if stage == "predict" and not self.predict_split_names:
            raise UserError(
                f"no test split of {self.task_spec.name} found; "
                f"expected {self._source.expected(self.task_spec.test_splits)}"
            )
        train = ["train"] if stage in ("fit", None) else []
        evaluated = self.val_split_names if stage != "predict" else []
        predicted = self.predict_split_names if stage in ("predict", None) else []
        return train + evaluated + predicted

    def _tokenise(self, dataset: datasets.Dataset, split: str) -> datasets.Dataset:
        encode = partial(
            _encode_batch,
            tokenizer=self.tokenizer,
            text_columns=self.task_spec.text_columns,
            max_length=self.max_length,
        )
        return dataset.map(
            encode, batched=True, remove_columns=dataset.column_names, desc=f"Tokenising {self.task_spec.name} {split}"
        )

    def _loader(self, split: str, batch_size: int, shuffle: bool = False) -> DataLoader:
        dataset = self.split_dataset(split)
        # The run's seed (seed_everything, which exports PL_GLOBAL_SEED) decides the order, the
        # same on every process; the sampler lets a stopped run resume mid-epoch on that order
        # (tiedemb.data.sampling), and the loader's own generator keeps iterator creation from
        # drawing on the global RNG that dropout uses.
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        sampler = None
        if shuffle:
            grouped = (
                length_grouped(_lengths(dataset), batch_size, self.length_grouping) if self.length_grouping else None
            )
            sampler = self.resumable_sampler(
                dataset, batch_size=batch_size, seed=seed, keyed=False, sampler_factory=grouped
            )
        elif self.sort_eval_by_length:
            dataset = dataset.select(longest_first(_lengths(dataset)))
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            generator=loader_generator(seed),
            collate_fn=self._collate,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
        )


def _lengths(dataset: datasets.Dataset) -> list[int]:
    """Tokens per example (before padding)."""
    return [len(ids) for ids in dataset["input_ids"]] if len(dataset) else []


def _encode_batch(
    batch: dict[str, list], tokenizer: PreTrainedTokenizerBase, text_columns: tuple[str, ...], max_length: int
) -> dict[str, list]:
    """Tokenise a batch of examples without padding; padding happens per batch in the collator."""
    encoded = tokenizer(
        *(batch[column] for column in text_columns),
        truncation="longest_first",
        max_length=max_length,
        return_token_type_ids=True,
        return_attention_mask=True,
    )
    return {**encoded, "labels": batch["label"], "idx": batch["idx"]}


class _ClassicSource:
    """The classic ``glue_data/<TASK>/*.tsv`` layout. Each source says which of a task's splits are
    present, where they were looked for, and reads one with the hub text columns, ``label`` and ``idx``."""

    def __init__(self, task: GlueTask, data_dir: str | os.PathLike) -> None:
        self.task = task
        self.task_dir = find_task_dir(data_dir, task.classic)

    def _path(self, split: str) -> Path:
        return self.task_dir / self.task.classic.split_files[split]

    def present(self, splits: tuple[str, ...]) -> list[str]:
        return [split for split in splits if self._path(split).is_file()]

    def expected(self, splits: tuple[str, ...]) -> str:
        return " or ".join(repr(str(self._path(split))) for split in splits)

    def prepare(self) -> None:
        """Local files: nothing to fetch."""

    def load(self, split: str) -> datasets.Dataset:
        columns = read_split(
            self._path(split),
            self.task.classic,
            split,
            self.task.text_columns,
            labelled=split not in self.task.test_splits,
        )
        return datasets.Dataset.from_dict(columns)


class _HubSource:
    """The hub dataset (``nyu-mll/glue``) with the task name as its configuration."""

    def __init__(self, task: GlueTask, name: str) -> None:
        self.task = task
        self.name = name
        self._splits: datasets.DatasetDict | None = None

    def present(self, splits: tuple[str, ...]) -> list[str]:
        return list(splits)

    def expected(self, splits: tuple[str, ...]) -> str:
        return f"the splits {', '.join(splits)} in hub dataset {self.name!r}"

    def prepare(self) -> None:
        self._load()

    def load(self, split: str) -> datasets.Dataset:
        splits = self._load()
        if split not in splits:
            raise UserError(
                f"hub dataset {self.name!r} ({self.task.name}) has no split {split!r}; it has {', '.join(splits)}"
            )
        return self._conform(splits[split], split, labelled=split not in self.task.test_splits)

    def _conform(self, dataset: datasets.Dataset, split: str, labelled: bool) -> datasets.Dataset:
        """Check a hub split and reduce it to the text columns, ``label`` ids and ``idx``: unlabeled
        splits get ``-1``, a missing ``idx`` becomes the row number. The result stays backed by the
        hub's Arrow files, so its tokenised copy is cached on disk."""
        origin = f"{self.name}/{self.task.name}"
        required = [*self.task.text_columns, *(["label"] if labelled else [])]
        missing = [column for column in required if column not in dataset.column_names]
        if missing:
            raise UserError(
                f"{origin}: the {split} split lacks the column(s) {', '.join(missing)} "
                f"(found: {', '.join(dataset.column_names) or 'none'})"
            )
        if len(dataset) == 0:
            raise UserError(f"{origin}: the {split} split has no examples")
        dataset = dataset.select_columns([column for column in (*required, "idx") if column in dataset.column_names])
        if labelled:
            for row, label in enumerate(dataset["label"]):
                if not isinstance(label, int) or not 0 <= label < self.task.num_labels:
                    raise UserError(
                        f"{origin}, row {row + 1}: label {label!r} is not valid "
                        f"(expected an id 0-{self.task.num_labels - 1})"
                    )
        else:
            dataset = dataset.remove_columns([column for column in ("label",) if column in dataset.column_names])
            dataset = dataset.add_column("label", [UNLABELED] * len(dataset))
        if "idx" not in dataset.column_names:
            dataset = dataset.add_column("idx", list(range(len(dataset))))
        return dataset

    def _load(self) -> datasets.DatasetDict:
        if self._splits is None:
            offline = hub_offline_requested()  # then hub data may only come from the local cache
            # A local copy needs no hub; without the probe an unreachable hub is reported after ~25 s.
            reason = None if offline or Path(self.name).exists() else hub_problem()
            try:
                if reason is not None:
                    raise ConnectionError(reason)
                self._splits = datasets.load_dataset(self.name, self.task.name)
            except Exception as error:  # offline, unknown name, no cached copy: all fixed the same way
                cache_hint = "" if offline else ", or set HF_HUB_OFFLINE=1 to use a copy in the local cache"
                raise UserError(
                    f"could not load GLUE {self.task.name} from the hub dataset {self.name!r} ({error}). "
                    f"Pass data_dir (a classic glue_data folder) instead{cache_hint}."
                ) from None
        return self._splits
