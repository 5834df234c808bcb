"""Every option of the four classes users configure takes effect or is refused: none is dropped silently.

``OPTIONS`` classifies each init argument of ``PretrainModule``, ``GlueModule``, ``PretrainData``
and ``GlueData``, read as LightningCLI shows them (``tiedemb.options.class_parameters``): an
argument added to a class fails ``test_every_option_is_classified`` until it is classified here.
For every context (each output head and a pretrained BERT for the modules; the embedded corpus,
local files and a hub dataset name for the pretraining data; a GLUE folder, GLUE files and the
hub for GLUE) the classification says what giving the option a value other than the default
does, and ``test_option`` checks it by building the objects at tiny sizes:

* ``EFFECT``: the object differs from the one built without it, in what it does (its parameters,
  a forward pass in training mode, its optimiser and schedule, its batches, what its consumer reads);
* ``refused(...)``: construction raises a ``UserError`` naming the option;
* ``warned(...)``: construction warns naming it (kept where refusing would break composed configs);
* ``LINKED``: the command line takes it from the data and refuses a value given for it.

A check may add a condition to both objects (``also``): ``rope_base`` acts with ``position: rope``
and is refused without it. No network: the hub is a stand-in for ``datasets.load_dataset``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import pytest
import torch
from tiny_vocab import TINY_VOCAB
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizer

from tiedemb.cli import refuse_linked_settings
from tiedemb.data import GlueData, PretrainData
from tiedemb.data.glue_tasks import TASKS
from tiedemb.errors import UserError
from tiedemb.modules.glue import GlueModule
from tiedemb.modules.pretrain import PretrainModule
from tiedemb.options import NoEffectWarning, class_parameters

EFFECT = "effect"
LINKED = "linked"


def refused(needle: str | None = None) -> str:
    return f"refused:{needle or ''}"


def warned(needle: str | None = None) -> str:
    return f"warned:{needle or ''}"


@dataclass
class Check:
    """Give ``given`` (the option, and any companion it needs) on top of the context and ``also``."""

    given: dict[str, Any]
    outcome: str
    also: dict[str, Any] = field(default_factory=dict)
    only: str | None = None  # compare this one part of what the objects do (one of ONLY_ON_REQUEST)


ONLY_ON_REQUEST = ("cached", "tokenised_with")
"""Parts compared only when a check names them: they hold where a shared cache put earlier results."""


# -- the contexts ----------------------------------------------------------------------------------
HEADS = ("untied", "tied", "tied_scaled_init", "tied_orth", "tied_shuffle")
TINY = dict(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=16)
"""The modules' architecture in every context without a pretrained model; the tiny BERTs have it too."""
BERT_CONTEXTS = ("bert_mlm", "bert")  # a BertForMaskedLM (BERT's head comes with it), a BertModel (fresh head)
PRETRAIN_CONTEXTS = (*HEADS, *BERT_CONTEXTS)
GLUE_MODULE_CONTEXTS = ("random", "bert")
PRETRAIN_DATA_CONTEXTS = ("embedded", "files", "hub")
GLUE_DATA_CONTEXTS = ("glue_dir", "glue_hub")


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> SimpleNamespace:
    """Tiny BERTs, tokenizers, text and GLUE files shared by every check."""
    root = tmp_path_factory.mktemp("every_option")
    bert_config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        type_vocab_size=2,
    )
    folders = {}
    for name, model_class in (("bert_mlm", BertForMaskedLM), ("bert", BertModel)):
        torch.manual_seed(0 if name == "bert" else 1)
        model_class(bert_config).save_pretrained(str(root / name))
        folders[name] = str(root / name)
    tokenizers = {}
    for name, words in (("tiny", TINY_VOCAB), ("other", TINY_VOCAB[:5] + TINY_VOCAB[5:][::-1])):
        BertTokenizer(vocab={word: number for number, word in enumerate(words)}).save_pretrained(str(root / name))
        tokenizers[name] = str(root / name)
    sentences = [
        "the man is sleeping .",
        "a dog is running !",
        "the woman sits .",
        "people are not sleeping ?",
        "a cat was running , yes .",
        "the person sits no",
    ]
    lines = [f"{a} {b} {c}" for a in sentences for b in sentences for c in sentences[:2]]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    (root / "other.txt").write_text("\n".join(reversed(lines)) + "\n")
    (root / "val.txt").write_text("\n".join(lines[-20:]) + "\n")
    pairs = [
        (sentences[i % 6] + " the man is", sentences[(i * 5 + 1) % 6] + " a dog" * (i % 4), i % 2) for i in range(16)
    ]
    for folder, header, spell, dev in (
        (
            "MRPC",
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n",
            lambda i, a, b, y: f"{y}\t{i}\t{i + 100}\t{a}\t{b}",
            "dev.tsv",
        ),
        (
            "MNLI",
            "index\tsentence1\tsentence2\tgold_label\n",
            lambda i, a, b, y: f"{i}\t{a}\t{b}\t{('entailment', 'neutral')[y]}",
            "dev_matched.tsv",
        ),
    ):
        for glue, rows in (("glue", pairs), ("glue_other", pairs[::-1])):
            (root / glue / folder).mkdir(parents=True, exist_ok=True)
            for split in ("train.tsv", dev):
                (root / glue / folder / split).write_text(
                    header + "\n".join(spell(i, a, b, y) for i, (a, b, y) in enumerate(rows)) + "\n"
                )
    return SimpleNamespace(root=root, bert=folders, tokenizer=tokenizers, pairs=pairs, lines=lines)


@pytest.fixture(autouse=True)
def fake_hub(monkeypatch, place):
    """``datasets.load_dataset`` answering hub names from memory: what each name and config hold differs."""

    real = datasets.load_dataset

    def load_dataset(name: str, config: str | None = None, *args: Any, **kwargs: Any) -> datasets.DatasetDict:
        if "data_files" in kwargs:  # a local file read by a builder (json, csv, parquet): no hub involved
            return real(name, config, *args, **kwargs)
        if config in TINY_GLUE_CONFIGS:  # GLUE: nyu-mll/glue or another name, task as config
            rows = place.pairs if name == "nyu-mll/glue" else place.pairs[::-1]
            first, second = ("premise", "hypothesis") if config == "mnli" else ("sentence1", "sentence2")
            split = {
                first: [a for a, _, _ in rows],
                second: [b for _, b, _ in rows],
                "label": [y for _, _, y in rows],
                "idx": list(range(len(rows))),
            }
            task = TASKS[config]  # the splits the hub has: MNLI's dev sets are two
            return datasets.DatasetDict(
                {split_name: datasets.Dataset.from_dict(split) for split_name in ("train", *task.validation_splits)}
            )
        lines = place.lines if (name, config) == ("fake/text", None) else place.lines[::-1]
        split = {"text": lines, "body": [line.upper() + " the man" for line in lines]}
        return datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_dict(split),
                "validation": datasets.Dataset.from_dict({k: v[:20] for k, v in split.items()}),
            }
        )

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


TINY_GLUE_CONFIGS = ("mrpc", "mnli")


def pretrain_context(context: str, place: SimpleNamespace) -> dict[str, Any]:
    if context in HEADS:
        return {**TINY, "head": context}
    return {"pretrained": place.bert[context]}


def glue_module_context(context: str, place: SimpleNamespace) -> dict[str, Any]:
    base = {"task": "mrpc", "num_labels": 2}
    return {**base, **TINY} if context == "random" else {**base, "pretrained": place.bert["bert"]}


def pretrain_data_context(context: str, place: SimpleNamespace) -> dict[str, Any]:
    small = {"block_size": 8, "batch_size": 2}
    if context == "embedded":
        return {**small, "vocab_size": 100, "synthetic_tokens": 256, "synthetic_val_tokens": 64}
    source = {"train_files": [str(place.root / "train.txt")]} if context == "files" else {"dataset": "fake/text"}
    return {**small, **source, "tokenizer": place.tokenizer["tiny"], "cache_dir": str(place.root / "cache")}


def glue_data_context(context: str, place: SimpleNamespace) -> dict[str, Any]:
    base = {"task": "mrpc", "tokenizer": place.tokenizer["tiny"], "batch_size": 2}
    if context == "glue_dir":
        return {**base, "data_dir": str(place.root / "glue")}
    return base


# -- what an object does ---------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return [round(float(x), 7) for x in value.detach().float().flatten().tolist()]
    if isinstance(value, Mapping):  # BatchEncoding too
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _schedule(module) -> dict[str, Any]:
    module._trainer = SimpleNamespace(
        estimated_stepping_batches=400, loggers=[], default_root_dir="root", datamodule=None, world_size=1
    )
    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    groups = [{key: group[key] for key in ("lr", "betas", "eps", "weight_decay")} for group in optimizer.param_groups]
    return {"groups": groups, "multipliers": [scheduler.lr_lambdas[0](step) for step in range(0, 400, 7)]}


def _peak(module) -> float | None:
    from tiedemb.modules.throughput import ModelThroughput

    return ModelThroughput().own_peak(module)  # the peak MFU is measured against


def pretrain_module_does(module: PretrainModule) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, module.config.vocab_size, (2, 12), generator=generator)
    labels = input_ids.clone()
    if not module.config.causal:
        labels[:, ::2] = -100
    module.train()
    torch.manual_seed(4)
    output = module(input_ids, labels=labels)
    done = {
        "state": {name: _plain(tensor) for name, tensor in module.state_dict().items()},
        "loss": _plain(output.loss),
        "logits": _plain(output.logits),
        **_schedule(module),
        "peak": _peak(module),
    }
    module.configure_model()
    done["compiled"] = [block._compiled_call_impl is not None for block in module.model.encoder.blocks]
    return done


def glue_module_does(module: GlueModule) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(3)
    batch = {
        "input_ids": torch.randint(5, module.config.vocab_size, (4, 12), generator=generator),
        "attention_mask": torch.ones(4, 12, dtype=torch.long),
        "token_type_ids": torch.zeros(4, 12, dtype=torch.long),
        "labels": torch.tensor([0, 1, 1, 0]),
        "idx": torch.arange(4),
    }
    module.train()
    torch.manual_seed(4)
    logits = module(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    done = {
        "state": {name: _plain(tensor) for name, tensor in module.state_dict().items()},
        "logits": _plain(logits),
        **_schedule(module),
        "predictions_dir": str(module._output_dir()),
    }
    module.setup("test")
    module.eval()
    module.test_step(batch, 0)
    done["test_rows_kept"] = bool(module._rows)
    return done


def _first_batch(loader) -> Any:
    """The loader's first batch, collated in this process (no worker processes started)."""
    indices = next(iter(loader.batch_sampler))
    return _plain(loader.collate_fn([loader.dataset[index] for index in indices]))


def _loaders(loaders) -> dict[str, Any]:
    loaders = loaders if isinstance(loaders, list) else [loaders]
    return {
        "batches": [_first_batch(loader) for loader in loaders],
        "order": [[list(batch) for batch in loader.batch_sampler] for loader in loaders],
        "workers": [loader.num_workers for loader in loaders],
        "pinned": [loader.pin_memory for loader in loaders],
    }


def pretrain_data_does(data: PretrainData) -> dict[str, Any]:
    TOKENISED_WITH.clear()
    data.prepare_data()
    data._tokenised_with += TOKENISED_WITH  # what preparing it tokenised
    data.setup("fit")
    cache = Path(data.hparams.cache_dir)
    return {
        "vocab_size": data.vocab_size,
        "special": [data.pad_token_id, data.mask_token_id],
        "train": _loaders(data.train_dataloader()),
        "val": _loaders(data.val_dataloader()),
        "sizes": [len(data.train_set), len(data.val_set)],
        "cached": sorted(str(path) for path in cache.rglob("stats.json")) if cache.is_dir() else [],
        "tokenised_with": data._tokenised_with,
    }


def glue_data_does(data: GlueData) -> dict[str, Any]:
    data.setup("fit")
    return {
        "task": data.task_spec.name,
        "vocab_size": data.vocab_size,
        "num_labels": data.num_labels,
        "train": _loaders(data.train_dataloader()),
        "val": _loaders(data.val_dataloader()),
    }


TOKENISED_WITH: list[Any] = []
"""``num_proc`` of each ``datasets.map`` that tokenised text (recorded by ``spy_on_tokenising``)."""


@pytest.fixture(autouse=True)
def spy_on_tokenising(monkeypatch):
    """Record the processes each tokenisation asks for, and run it in this one (quick for tiny text)."""
    import tiedemb.data.text as text

    original = text._tokenize_documents

    def tokenise(documents, tokenizer, separator, num_proc, fingerprint):
        TOKENISED_WITH.append(num_proc)
        return original(documents, tokenizer, separator, None, fingerprint)

    TOKENISED_WITH.clear()
    monkeypatch.setattr(text, "_tokenize_documents", tokenise)


# -- the classification ------------------------------------------------------------------------------
Rule = Callable[[str, SimpleNamespace], list[Check]]


def always(value: Any) -> Callable[[str], Rule]:
    """Acts in every context."""
    return lambda name: lambda context, place: [Check({name: value}, EFFECT)]


def linked(value: Any) -> Callable[[str], Rule]:
    """Taken from the data by the command line (checked through ``refuse_linked_settings``)."""
    return lambda name: lambda context, place: [Check({name: value}, LINKED)]


def architecture(value: Any, **extra: list[Check]) -> Callable[[str], Rule]:
    """A module's architecture: acts without a pretrained model; with one it must agree with it."""

    def rule(name: str) -> Rule:
        def checks(context: str, place: SimpleNamespace) -> list[Check]:
            if context in BERT_CONTEXTS:
                return [Check({name: value}, refused("does not fit the pretrained"))]
            return [Check({name: value}, EFFECT), *extra.get("without_pretrained", [])]

        return checks

    return rule


def by_context(table: dict[str, Callable[[str, SimpleNamespace], list[Check]]]) -> Callable[[str], Rule]:
    """Context by context (``"*"``: every context not named)."""
    return lambda name: lambda context, place: table.get(context, table.get("*"))(name, place)


TRANSFORM_READERS = "tied_orth or untied_orth"  # the heads that read head_bias, head_activation, head_norm


def head_only(value: Any, owner: str, bert_mlm_value: Any = None, readers: str | None = None) -> Callable[[str], Rule]:
    """Read by the ``owner`` head (and the others ``readers`` names) alone; BERT's head fixes the tied_orth settings."""

    def rule(name: str) -> Rule:
        def checks(context: str, place: SimpleNamespace) -> list[Check]:
            if context == owner:
                return [Check({name: value}, EFFECT)]
            if context == "bert_mlm" and bert_mlm_value is not None:
                return [Check({name: bert_mlm_value}, refused("does not fit the pretrained"))]
            return [Check({name: value}, refused(f"only the {readers or owner} head reads it"))]

        return checks

    return rule


def effect(value: Any, **also: Any) -> Callable[[str, SimpleNamespace], list[Check]]:
    return lambda name, place: [Check({name: value}, EFFECT, also)]


def refusal(value: Any, needle: str | None = None, **also: Any) -> Callable[[str, SimpleNamespace], list[Check]]:
    return lambda name, place: [Check({name: value}, refused(needle), also)]


def both(*parts: Callable[[str, SimpleNamespace], list[Check]]) -> Callable[[str, SimpleNamespace], list[Check]]:
    return lambda name, place: [check for part in parts for check in part(name, place)]


def _other_head(context: str) -> str:
    return "untied" if context != "untied" else "tied"


SCHEDULE = {
    "learning_rate": always(1e-2),
    "weight_decay": always(0.3),
    "betas": always((0.8, 0.9)),
    "eps": always(1e-3),
    "lr_decay": always("cosine"),
    "min_lr_ratio": by_context({"*": both(effect(0.5), refusal(0.5, lr_decay="constant"))}),
}

PRETRAIN_MODULE: dict[str, Callable[[str], Rule]] = {
    "vocab_size": linked(60),
    "objective": by_context({"*": effect("clm"), "bert_mlm": refusal("clm"), "bert": refusal("clm")}),
    "hidden_size": architecture(24),
    "num_layers": architecture(2),
    "num_heads": architecture(4),
    "intermediate_size": architecture(48),
    "embedding_dim": architecture(8),
    "embedding_projection": architecture("always"),
    "embedding_norm": architecture(False),
    "max_position_embeddings": architecture(
        24,
        without_pretrained=[
            Check({"max_position_embeddings": 24}, warned("no position or rotary table"), {"position": "none"})
        ],
    ),
    "position": architecture("rope"),
    "type_vocab_size": architecture(0),
    "norm": architecture("rmsnorm"),
    "norm_position": architecture("pre"),
    "norm_eps": architecture(1e-3),
    "activation": architecture("relu"),
    "residual_init": architecture("zero"),
    "rope_base": by_context(
        {
            "*": both(refusal(100.0, "only rotary positions"), effect(100.0, position="rope")),
            "bert_mlm": refusal(100.0),
            "bert": refusal(100.0),
        }
    ),
    "dropout": always(0.3),
    "attention_dropout": always(0.3),
    "init_std": by_context(
        {
            "*": effect(0.05),
            "bert_mlm": refusal(0.05, "every weight it would draw"),
            "bert": both(refusal(0.05, "every weight it would draw"), effect(0.05, head="untied")),
        }
    ),
    "head": lambda name: (
        lambda context, place: [
            Check({name: _other_head(context)}, refused("does not fit") if context == "bert_mlm" else EFFECT)
        ]
    ),
    "output_bias": by_context({"*": effect(True), "bert_mlm": refusal(False, "does not fit")}),
    "head_bias": head_only(True, "tied_orth", bert_mlm_value=False, readers=TRANSFORM_READERS),
    "head_activation": head_only("gelu", "tied_orth", bert_mlm_value="relu", readers=TRANSFORM_READERS),
    "head_norm": head_only(True, "tied_orth", bert_mlm_value=False, readers=TRANSFORM_READERS),
    "shuffle": head_only("channel_shuffle", "tied_shuffle"),
    "shuffle_groups": by_context(
        {
            "*": refusal(4, "only the tied_shuffle head reads it"),
            "tied_shuffle": both(refusal(4, "groups are for channel_shuffle"), effect(4, shuffle="channel_shuffle")),
        }
    ),
    "embedding_scale": by_context({"*": effect(2.0), "bert_mlm": refusal(2.0), "bert": refusal(2.0)}),
    "output_scale": by_context({"*": effect(2.0), "bert_mlm": refusal(2.0)}),
    "embedding_init_std": by_context(
        {
            "*": effect(0.5),
            "tied_scaled_init": lambda name, place: [
                Check({name: 0.5}, warned("draws the shared table with std ln(n)/d_e"))
            ],
            "bert_mlm": refusal(0.5, "the token table is the pretrained one"),
            "bert": refusal(0.5, "the token table is the pretrained one"),
        }
    ),
    "pad_token_id": linked(3),
    **SCHEDULE,
    "warmup_steps": always(7),
    "compile": always(True),
    "peak_flops": always(1e12),
    "pretrained": by_context(
        {
            "*": lambda name, place: [Check({name: place.bert["bert"]}, EFFECT)],
            "tied_scaled_init": lambda name, place: [Check({name: place.bert["bert"]}, refused("scaled draw"))],
            "bert_mlm": lambda name, place: [Check({name: place.bert["bert"]}, EFFECT)],
            "bert": lambda name, place: [Check({name: place.bert["bert_mlm"]}, EFFECT)],
        }
    ),
}

GLUE_MODULE: dict[str, Callable[[str], Rule]] = {
    **{
        name: rule
        for name, rule in PRETRAIN_MODULE.items()
        if name
        in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "embedding_projection",
            "embedding_norm",
            "max_position_embeddings",
            "position",
            "type_vocab_size",
            "norm",
            "norm_position",
            "norm_eps",
            "activation",
            "residual_init",
            "dropout",
            "attention_dropout",
            "vocab_size",
            "pad_token_id",
        )
    },
    "embedding_dim": always(8),  # with a pretrained model: its tables narrowed by SVD
    "rope_base": by_context(
        {
            "random": both(refusal(100.0, "only rotary positions"), effect(100.0, position="rope")),
            "bert": refusal(100.0),
        }
    ),
    "init_std": always(0.05),  # the classifier is always drawn afresh
    "num_labels": linked(3),
    "task": linked("mnli"),
    "pretrained": by_context(
        {
            "random": lambda name, place: [Check({name: place.bert["bert"]}, EFFECT)],
            "bert": lambda name, place: [Check({name: place.bert["bert_mlm"]}, EFFECT)],
        }
    ),
    "reinit_embeddings": by_context({"random": refusal(True, "without model.pretrained"), "bert": effect(True)}),
    "narrowing": by_context(
        {
            "random": refusal("energy", "without model.pretrained"),
            "bert": both(
                effect("energy", embedding_dim=8),
                lambda name, place: [Check({name: "energy"}, warned("is not narrowed"))],
            ),
        }
    ),
    "pooler": always(False),
    "classifier_dropout": always(0.5),
    **SCHEDULE,
    "warmup_ratio": by_context({"*": both(effect(0.3), refusal(0.3, "overrides it", warmup_steps=2))}),
    "warmup_steps": always(3),
    "predictions_dir": always("somewhere/else"),
    "write_test_predictions": always(False),
}

PRETRAIN_DATA: dict[str, Callable[[str], Rule]] = {
    "dataset": by_context(
        {
            "embedded": lambda name, place: [
                Check(
                    {
                        name: "fake/text",
                        "tokenizer": place.tokenizer["tiny"],
                        "vocab_size": None,
                        "cache_dir": str(place.root / "cache"),
                    },
                    EFFECT,
                )
            ],
            "files": refusal("fake/text", "data.dataset and data.train_files are both given"),
            "hub": effect("fake/other"),
        }
    ),
    "dataset_config": by_context({"*": refusal("wikitext-2"), "hub": effect("wikitext-2")}),
    "train_files": by_context(
        {
            "embedded": lambda name, place: [
                Check(
                    {
                        name: [str(place.root / "train.txt")],
                        "tokenizer": place.tokenizer["tiny"],
                        "vocab_size": None,
                        "cache_dir": str(place.root / "cache"),
                    },
                    EFFECT,
                )
            ],
            "files": lambda name, place: [Check({name: [str(place.root / "other.txt")]}, EFFECT)],
            "hub": lambda name, place: [Check({name: [str(place.root / "other.txt")]}, refused("both given"))],
        }
    ),
    "val_files": by_context(
        {
            "embedded": lambda name, place: [
                Check({name: [str(place.root / "val.txt")]}, refused("without data.train_files"))
            ],
            "*": lambda name, place: [Check({name: [str(place.root / "val.txt")]}, EFFECT)],
        }
    ),
    "text_column": by_context(
        {
            "embedded": refusal("body", "the embedded corpus reads no text"),
            "files": refusal("body", "without data.dataset"),
            "hub": effect("body"),
        }
    ),
    "tokenizer": by_context(
        {
            "embedded": lambda name, place: [
                Check({name: place.tokenizer["other"]}, refused("has its own vocabulary"))
            ],
            "*": lambda name, place: [Check({name: place.tokenizer["other"]}, EFFECT)],
        }
    ),
    "vocab_size": by_context(
        {
            "embedded": effect(120),
            "*": both(
                lambda name, place: [Check({name: 60}, warned("the vocabulary is the tokenizer's"))],
                effect(40, tokenizer=None, vocab_size=20),
            ),
        }
    ),
    "block_size": always(4),
    "batch_size": always(3),
    "objective": always("clm"),
    "mlm_probability": by_context({"*": both(effect(0.5), refusal(0.5, "masks nothing", objective="clm"))}),
    "val_fraction": by_context(
        {
            "embedded": refusal(0.2, "data.synthetic_val_tokens"),
            "files": lambda name, place: [
                Check({name: 0.2}, EFFECT),
                Check(
                    {name: 0.2},
                    refused("the validation text is those files"),
                    {"val_files": [str(place.root / "val.txt")]},
                ),
            ],
            "hub": refusal(0.2, "own validation split"),
        }
    ),
    "synthetic_tokens": by_context(
        {"embedded": effect(512), "*": lambda name, place: [Check({name: 512}, warned("sizes the embedded corpus"))]}
    ),
    "synthetic_val_tokens": by_context(
        {"embedded": effect(128), "*": lambda name, place: [Check({name: 128}, warned("sizes the embedded corpus"))]}
    ),
    # Speed only: what reaches the tokenising map, when the text is tokenised (a cached text is not).
    "num_proc": by_context(
        {
            "embedded": refusal(2, "generated, not tokenised"),
            "*": lambda name, place: [
                Check(
                    {name: 2, "cache_dir": str(place.root / "fresh-cache-b")},
                    EFFECT,
                    {"cache_dir": str(place.root / "fresh-cache-a")},
                    only="tokenised_with",
                )
            ],
        }
    ),
    "num_workers": always(1),
    "pin_memory": always(True),
    "cache_dir": by_context(
        {
            "embedded": refusal("elsewhere", "never cached"),
            "*": lambda name, place: [Check({name: str(place.root / "other-cache")}, EFFECT, only="cached")],
        }
    ),
    "seed": always(1),
    # the held-out documents (files), the corpus (embedded) and, for MLM, the validation masks (all)
    "corpus_seed": always(1),
    "ood_val_files": by_context(
        {
            "embedded": lambda name, place: [
                Check({name: [str(place.root / "val.txt")]}, refused("without data.train_files"))
            ],
            "*": lambda name, place: [Check({name: [str(place.root / "val.txt")]}, EFFECT)],
        }
    ),
    "ood_val_blocks": by_context(
        {
            "embedded": refusal(2, "without data.ood_val_files"),
            "*": both(
                refusal(2, "without data.ood_val_files"),
                lambda name, place: [Check({name: 1}, EFFECT, {"ood_val_files": [str(place.root / "val.txt")]})],
            ),
        }
    ),
}

GLUE_DATA: dict[str, Callable[[str], Rule]] = {
    "task": by_context(
        {
            "glue_dir": effect("mnli"),
            "glue_hub": effect("mnli"),
        }
    ),
    "tokenizer": lambda name: lambda context, place: [Check({name: place.tokenizer["other"]}, EFFECT)],
    "data_dir": by_context(
        {
            "glue_dir": lambda name, place: [Check({name: str(place.root / "glue_other")}, EFFECT)],
            "glue_hub": lambda name, place: [Check({name: str(place.root / "glue_other")}, EFFECT)],
        }
    ),
    "max_length": always(8),
    "batch_size": always(3),
    "eval_batch_size": always(5),
    "num_workers": always(1),
    "pin_memory": always(True),
    "hub_dataset": by_context(
        {
            "glue_hub": effect("someone/glue"),
            "glue_dir": refusal("someone/glue", "data.data_dir"),
        }
    ),
    "max_train_samples": always(5),
    "length_grouping": always(3),
    "sort_eval_by_length": always(True),
}

CLASSES = {
    "PretrainModule": (
        PretrainModule,
        "model",
        PRETRAIN_MODULE,
        PRETRAIN_CONTEXTS,
        pretrain_context,
        pretrain_module_does,
    ),
    "GlueModule": (GlueModule, "model", GLUE_MODULE, GLUE_MODULE_CONTEXTS, glue_module_context, glue_module_does),
    "PretrainData": (
        PretrainData,
        "data",
        PRETRAIN_DATA,
        PRETRAIN_DATA_CONTEXTS,
        pretrain_data_context,
        pretrain_data_does,
    ),
    "GlueData": (GlueData, "data", GLUE_DATA, GLUE_DATA_CONTEXTS, glue_data_context, glue_data_does),
}


def options_of(cls: type) -> list[str]:
    return list(class_parameters(cls))


# -- the tests -------------------------------------------------------------------------------------
@pytest.mark.parametrize("class_name", list(CLASSES))
def test_every_option_is_classified(class_name):
    cls, _, table, *_ = CLASSES[class_name]
    assert set(options_of(cls)) == set(table), (
        f"{class_name}'s options without a classification: {sorted(set(options_of(cls)) - set(table))}; "
        f"classified but gone: {sorted(set(table) - set(options_of(cls)))}"
    )


def build(cls: type, settings: dict[str, Any]) -> tuple[Any, list[str]]:
    """The object, built with a fixed seed, and the no-effect warnings its construction gave."""
    torch.manual_seed(0)
    TOKENISED_WITH.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = cls(**settings)
    built._tokenised_with = list(TOKENISED_WITH)  # what its own construction tokenised
    return built, [str(warning.message) for warning in caught if issubclass(warning.category, NoEffectWarning)]


CASES = [
    (class_name, option, context)
    for class_name, (cls, _, table, contexts, *_) in CLASSES.items()
    for option in options_of(cls)
    for context in contexts
]


@pytest.mark.parametrize(("class_name", "option", "context"), CASES, ids=[f"{c}-{o}-{x}" for c, o, x in CASES])
def test_option(class_name, option, context, place):
    cls, prefix, table, _, context_of, does = CLASSES[class_name]
    if option not in table:
        pytest.fail(f"{class_name}.{option} is not classified")
    checks = table[option](option)(context, place)
    assert checks
    for check in checks:
        baseline_settings = {**context_of(context, place), **check.also}
        settings = {**baseline_settings, **check.given}
        if check.outcome == LINKED:
            model = {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": {option: check.given[option]}}
            with pytest.raises(UserError, match=f"{prefix}.{option}=.* is set from the data"):
                refuse_linked_settings(model)
            continue
        kind, _, needle = check.outcome.partition(":")
        if kind == "refused":
            with pytest.raises(UserError) as raised:
                built, _ = build(cls, settings)
                # A hub dataset's own splits are known once prepare_data reads it: refused there,
                # before a run folder is made (the command line prepares the text before fit).
                built.prepare_data()
            message = str(raised.value)
            assert f"{prefix}.{option}" in message or (needle and needle.startswith(prefix)), message
            assert needle in message, message
            continue
        baseline, baseline_warnings = build(cls, baseline_settings)
        before = does(baseline)
        variant, variant_warnings = build(cls, settings)
        if kind == "warned":
            new = [text for text in variant_warnings if text not in baseline_warnings]
            assert any(f"{prefix}.{option}=" in text and needle in text for text in new), variant_warnings
            continue
        assert kind == EFFECT
        assert not [text for text in variant_warnings if f"{prefix}.{option}=" in text], variant_warnings
        after = does(variant)
        if check.only is not None:
            before, after = before[check.only], after[check.only]
        else:
            before, after = (
                {key: value for key, value in done.items() if key not in ONLY_ON_REQUEST} for done in (before, after)
            )
        assert after != before, f"{prefix}.{option}={check.given[option]!r} changed nothing in {context}"


@pytest.mark.parametrize("class_name", list(CLASSES))
def test_what_an_object_does_is_reproducible(class_name, place):
    """The comparisons mean something: two builds of one context do the same."""
    cls, _, _, contexts, context_of, does = CLASSES[class_name]
    settings = context_of(contexts[0], place)
    assert does(build(cls, settings)[0]) == does(build(cls, settings)[0])
