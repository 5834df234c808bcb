"""Pretraining data: the embedded Markov corpus by default, real text when given. The vocabulary
is known on construction (for the CLI to link into the model); text is tokenised in ``prepare_data``."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
from typing import TYPE_CHECKING, Any, Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from tiedemb.data.collate import CausalCollator, MaskingCollator
from tiedemb.data.sampling import KeyedDataset, ResumableTraining
from tiedemb.data.synthetic import SPECIAL_TOKENS, MarkovCorpus
from tiedemb.data.tokenizers import TEXT_COLUMN, TOKENIZER_STATE, VAL_FRACTION, tokenizer_fingerprint
from tiedemb.errors import UserError
from tiedemb.options import (
    AtLeastTwo,
    NonNegativeInt,
    OpenFraction,
    PositiveInt,
    Rate,
    changed_from_default,
    no_effect,
    warn_no_effect,
)
from tiedemb.training.metric_names import baseline_name

if TYPE_CHECKING:
    from tiedemb.data.text import TextCache

log = logging.getLogger("tiedemb.data")

DEFAULT_SYNTHETIC_VOCAB = 4096


def _check_source_options(source: str, options: dict[str, Any]) -> None:
    """Refuse each setting the chosen source would ignore (its reason ``False`` where it is read); the
    embedded corpus's sizes are only warned about: the study's recipe sets them, a data overlay replaces it."""
    if source == "dataset" and options.get("train_files"):
        raise UserError("data.dataset and data.train_files are both given; choose one source of text")
    synthetic = source == "synthetic"
    embedded = "without data.train_files or data.dataset: the embedded corpus"
    refused = {
        "tokenizer": synthetic and f"{embedded}, which has its own vocabulary, is used",
        "val_files": synthetic and f"{embedded} is used; give the training text too",
        "ood_val_files": synthetic and f"{embedded} is used; give the training text too",
        "dataset_config": source != "dataset" and "without data.dataset (a hub dataset name)",
        "text_column": (synthetic and f"{embedded} reads no text")
        or (source == "files" and "without data.dataset: each line of a .txt file is a document"),
        "val_fraction": (synthetic and f"{embedded}'s validation text is data.synthetic_val_tokens")
        or (bool(options.get("val_files")) and "with data.val_files: the validation text is those files"),
        "num_proc": synthetic and f"{embedded} is generated, not tokenised",
        "cache_dir": synthetic and f"{embedded} is generated, never cached",
        "mlm_probability": options.get("objective") == "clm"
        and "with objective 'clm': next-token prediction masks nothing",
        "ood_val_blocks": not options.get("ood_val_files") and "without data.ood_val_files: it caps that text",
    }
    given = "data.dataset" if source == "dataset" else "data.train_files"
    unused = f"with {given}: it sizes the embedded corpus, which this run does not use"
    warned = dict.fromkeys(("synthetic_tokens", "synthetic_val_tokens"), not synthetic and unused)
    defaults = {
        name: parameter.default for name, parameter in inspect.signature(PretrainData.__init__).parameters.items()
    }
    for name, why in {**refused, **warned}.items():
        if why and changed_from_default(options[name], defaults[name]):
            if name in refused:
                raise no_effect(f"data.{name}", options[name], why)
            warn_no_effect(f"data.{name}", options[name], why)


class PretrainData(ResumableTraining, L.LightningDataModule):
    """Blocks of ``block_size`` tokens for MLM or CLM from ``dataset``, else ``train_files``, else the
    embedded Markov corpus, whose exact entropy rate is the best loss any causal model can reach on it."""

    def __init__(
        self,
        dataset: str | None = None,
        dataset_config: str | None = None,
        train_files: list[str] | str | None = None,
        val_files: list[str] | str | None = None,
        text_column: str = TEXT_COLUMN,
        tokenizer: str | None = None,
        vocab_size: PositiveInt | None = None,
        block_size: AtLeastTwo = 128,
        batch_size: PositiveInt = 32,
        objective: Literal["mlm", "clm"] | None = None,
        mlm_probability: OpenFraction = 0.15,
        val_fraction: Rate = VAL_FRACTION,
        synthetic_tokens: PositiveInt = 2_000_000,
        synthetic_val_tokens: PositiveInt = 131_072,
        num_proc: PositiveInt | None = None,
        num_workers: NonNegativeInt = 0,
        pin_memory: bool = False,
        cache_dir: str = "data/cache",
        seed: NonNegativeInt | None = None,
        corpus_seed: NonNegativeInt = 0,
        ood_val_files: list[str] | str | None = None,
        ood_val_blocks: PositiveInt | None = None,
    ) -> None:
        """
        Args:
            dataset: a hub dataset name (``wikitext``), or a local folder of JSON lines or parquet files.
            dataset_config: that dataset's configuration (``wikitext-2-raw-v1``).
            train_files: local training text: UTF-8 ``.txt`` files, one document a line.
            val_files: local validation text. Unset: the dataset's validation split, else ``val_fraction``.
            text_column: the column holding the text in ``dataset``.
            tokenizer: a tokenizer folder or hub name. Unset: one trained on the training text, kept in ``cache_dir``.
            vocab_size: the size of the trained tokenizer, or of the embedded corpus (default 4096).
            block_size: tokens per training and validation block.
            batch_size: blocks per batch, in training and validation.
            objective: mlm or clm; the command line copies ``model.objective`` here.
            mlm_probability: the share of tokens masked for mlm.
            val_fraction: the share of training documents held out for validation (without ``val_files``).
            synthetic_tokens: training tokens drawn from the embedded Markov corpus.
            synthetic_val_tokens: validation tokens drawn from the embedded Markov corpus.
            num_proc: processes that tokenise text. Unset: one.
            num_workers: DataLoader worker processes.
            pin_memory: the DataLoader's page-locked batches (faster copies to a GPU).
            cache_dir: where tokenised text and trained tokenizers are kept (relative to the working folder).
            seed: the training order and the training masks. Unset: the run's ``seed_everything``.
            corpus_seed: which data there is (the held-out documents, the embedded corpus, the validation
                masks): fixed across a study's seeds, so every run is scored on the same tokens.
            ood_val_files: a second validation text (local files), logged as ``val_ood/loss``.
            ood_val_blocks: at most this many blocks of ``ood_val_files`` (its first ones).
        """
        # One file may be given alone; it is recorded, and read, as a list of one.
        train_files, val_files, ood_val_files = (
            [files] if isinstance(files, str) else files for files in (train_files, val_files, ood_val_files)
        )
        super().__init__()
        self.objective = objective = objective or "mlm"  # None: the CLI fills in model.objective
        # PL_GLOBAL_SEED: the run's seed_everything, set by the command line before the data is built
        self.seed = int(os.environ.get("PL_GLOBAL_SEED", 0)) if seed is None else seed
        self.block_size = block_size
        self.batch_size = batch_size
        self.source = "dataset" if dataset else "files" if train_files else "synthetic"
        _check_source_options(self.source, locals())
        self.save_hyperparameters()
        self.corpus: MarkovCorpus | None = None
        self.text: TextCache | None = None
        self.tokenizer = None
        if self.source == "synthetic":
            corpus = self.corpus = MarkovCorpus(vocab_size=vocab_size or DEFAULT_SYNTHETIC_VOCAB, seed=corpus_seed)
            self.vocab_size, self.pad_token_id, self.mask_token_id = corpus.vocab_size, 0, corpus.mask_token_id
            self.special_token_ids = list(range(len(SPECIAL_TOKENS)))
        else:
            from tiedemb.data.text import plan_text  # datasets and pyarrow: real text only

            # The tokenizer is decided now: the model's vocabulary is its size. The text is tokenised in prepare_data.
            self.text = plan_text(self.hparams, objective)
            tokenizer = self.tokenizer = self.text.tokenizer
            self.vocab_size = len(tokenizer)
            self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            self.mask_token_id = tokenizer.mask_token_id
            self.special_token_ids = list(tokenizer.all_special_ids)
        # the resolved size, which the CLI links into the model, is the one the logged config holds
        self.save_hyperparameters({**self.hparams, "vocab_size": self.vocab_size, "seed": self.seed})
        self.stats: dict[str, float] = {}
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.ood_val_set: Dataset | None = None

    def check_one_batch(self) -> None:
        """Refuse training data of fewer blocks than one batch: Lightning would end the run at once."""
        if self.source == "synthetic":
            blocks = self._synthetic_block_count(self.hparams.synthetic_tokens)
            more = "or raise data.synthetic_tokens"
        else:
            self.text.write()
            blocks = int(self.text.stats()["train_blocks"])
            more = "or give more text"
        if blocks < self.batch_size:
            raise UserError(
                f"the training data makes {blocks} block{'s' * (blocks != 1)} of data.block_size="
                f"{self.block_size} tokens, fewer than one batch (data.batch_size={self.batch_size}); "
                f"lower data.batch_size or data.block_size, {more}"
            )

    @property
    def repeat_rate(self) -> float:
        """Fraction of adjacent token pairs that repeat: the theory's CLM correction."""
        return self.corpus.repeat_rate if self.corpus is not None else float(self.stats.get("repeat_rate", 0.0))

    def describe(self) -> dict[str, float]:
        """Numbers logged once per run: the embedded corpus's exact entropies among them."""
        described = {
            f"data/{name}": float(value) for name, value in {"vocab_size": self.vocab_size, **self.stats}.items()
        }
        for name in ("entropy_rate", "mlm_bound", "unigram_entropy") if self.corpus is not None else ():
            described[f"data/{name}"] = getattr(self.corpus, name)
        return described

    def prepare_data(self) -> None:
        if self.text is not None:
            self.text.write()

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        hp = self.hparams
        if self.corpus is not None:

            def blocks(tokens: int, seed: int) -> torch.Tensor:
                stream = self.corpus.sample_documents(self._synthetic_block_count(tokens) * self.block_size, seed=seed)
                return torch.from_numpy(np.ascontiguousarray(stream, dtype=np.int64)).view(-1, self.block_size)

            train = blocks(hp.synthetic_tokens, hp.corpus_seed + 1)
            val = blocks(hp.synthetic_val_tokens, hp.corpus_seed + 2)
            self.train_set, self.val_set = BlockTensor(train), BlockTensor(val)
            self.stats = {"train_tokens": float(train.numel()), "val_tokens": float(val.numel())}
        else:
            splits = {name: split.with_format("torch") for name, split in self.text.open().items()}
            self.train_set, self.val_set = splits["train"], splits["val"]
            self.stats = {name: float(value) for name, value in self.text.stats().items()}
            val_ids = splits["val"].with_format("numpy")[:2048]["input_ids"]
            # the theory's CLM correction: how often a token is followed by itself
            self.stats["repeat_rate"] = float((val_ids[:, 1:] == val_ids[:, :-1]).mean()) if val_ids.size else 0.0
            if "ood_val" in splits:  # its first blocks only when capped (the whole text is cached once)
                ood, cap = splits["ood_val"], hp.ood_val_blocks
                self.ood_val_set = ood.select(range(min(cap, len(ood)))) if cap else ood
                self.stats["ood_val_blocks"] = float(len(self.ood_val_set))
        log.info("pretraining data: %s", ", ".join(f"{k}={v:g}" for k, v in self.stats.items()))

    def baselines(self, limit_val_blocks: int | None = None) -> dict[str, float]:
        """Add-one unigram and bigram losses of the training blocks on the validation blocks (and the
        out-of-domain ones), scored on the model's blocks and masks; ``limit_val_blocks``: the first only."""
        from tiedemb.data.baselines import ngram_baselines

        self.prepare_data()
        self.setup()
        train = _block_array(self.train_set)
        collator = self._collator(validation=True)
        results: dict[str, float] = {}
        for ood, dataset in ((False, self.val_set), (True, self.ood_val_set)):
            if dataset is None:
                continue
            blocks = _block_array(dataset, limit_val_blocks)
            losses = ngram_baselines(
                train, blocks, vocab_size=self.vocab_size, objective=self.objective, collator=collator
            )
            results |= {baseline_name(name, ood=ood): value for name, value in losses.items()}
        return results

    @functools.cached_property
    def tokenizer_fingerprint(self) -> str | None:
        return tokenizer_fingerprint(self.tokenizer) if self.tokenizer is not None else None

    def state_dict(self) -> dict[str, Any]:
        """The training position and the tokenizer's fingerprint: a run resumed with another
        tokenizer would read other rows of its embedding for the same words."""
        state = super().state_dict()
        return state | {TOKENIZER_STATE: self.tokenizer_fingerprint} if self.tokenizer is not None else state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        recorded = state_dict.get(TOKENIZER_STATE)
        if recorded is not None and self.tokenizer_fingerprint not in (None, recorded):
            raise UserError(
                f"the checkpoint was trained with another tokenizer (fingerprint {recorded}, now "
                f"{self.tokenizer_fingerprint}): a trained one is found again only while its text and "
                "data.cache_dir are unchanged; pass the run's tokenizer folder with --data.tokenizer"
            )
        super().load_state_dict(state_dict)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        if self.ood_val_set is None:
            return self._loader(self.val_set, shuffle=False)
        return [self._loader(self.val_set, shuffle=False), self._loader(self.ood_val_set, shuffle=False)]

    def test_dataloader(self) -> DataLoader | list[DataLoader]:  # pretraining text has no third split
        return self.val_dataloader()

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        workers = self.hparams.num_workers
        sampler = (
            self.resumable_sampler(dataset, batch_size=self.batch_size, seed=self.seed, drop_last=True)
            if shuffle
            else None
        )
        return DataLoader(
            KeyedDataset(dataset),
            batch_size=self.batch_size,
            sampler=sampler,
            drop_last=shuffle,
            collate_fn=self._collator(validation=not shuffle),
            num_workers=workers,
            pin_memory=self.hparams.pin_memory,
            persistent_workers=workers > 0,
            generator=torch.Generator().manual_seed(self.seed),  # leaves the global generator alone
        )

    def _collator(self, validation: bool):
        # Validation masks follow the corpus, not the run's seed: every run of a study is scored
        # on the same masked positions, so runs with different seeds are compared on equal terms.
        if self.objective == "clm":
            return CausalCollator(self.pad_token_id)
        return MaskingCollator(
            vocab_size=self.vocab_size,
            mask_token_id=self.mask_token_id,
            pad_token_id=self.pad_token_id,
            special_token_ids=self.special_token_ids,
            probability=self.hparams.mlm_probability,
            seed=self.hparams.corpus_seed if validation else self.seed,
        )

    def _synthetic_block_count(self, tokens: int) -> int:
        """Blocks drawn from the embedded corpus for a token budget: at least one, rounded up."""
        return max(1, math.ceil(tokens / self.block_size))


def _block_array(dataset: Dataset, limit: int | None = None) -> np.ndarray:
    """The (blocks, block_size) token ids of a block dataset, the first ``limit`` if given."""
    if isinstance(dataset, BlockTensor):
        return dataset.blocks[:limit].numpy()
    return dataset.with_format("numpy")[:limit]["input_ids"]


class BlockTensor(Dataset):
    """A (num_blocks, block_size) tensor served row by row."""

    def __init__(self, blocks: torch.Tensor) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return self.blocks.shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[index]}
