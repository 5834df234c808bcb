"""The modules' settings are explicit keyword arguments that agree with TransformerConfig, and a
subclass adds its own through ``super().__init__``."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import docstring_parser
import pytest
import torch

from tiedemb import GlueModule, PretrainModule
from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.modules.base import TransformerModule
from tiedemb.nn import HEADS
from tiedemb.nn.config import ARCHITECTURE, LANGUAGE_MODEL, TRAINING, TransformerConfig
from tiedemb.options import class_parameters
from tiedemb.weights.source import HEAD_SETTINGS

TINY = dict(vocab_size=40, hidden_size=16, num_heads=2, num_layers=1, intermediate_size=32)
CONFIG_TYPES = typing.get_type_hints(TransformerConfig, include_extras=True)
CONFIG_DEFAULTS = {field.name: field.default for field in dataclasses.fields(TransformerConfig)}


def own_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters ``cls.__init__`` declares itself (not those it passes on in ``**kwargs``)."""
    return {
        name: parameter
        for name, parameter in inspect.signature(cls.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not name.startswith("_")
    }


def documented(cls: type) -> dict[str, str]:
    """The descriptions of ``cls.__init__``'s docstring ``Args:`` (what ``--model.help`` shows)."""
    return {
        param.arg_name: " ".join(param.description.split())
        for param in docstring_parser.parse(cls.__init__.__doc__).params
    }


# Each module declares the config fields of the parts it takes, where the model reads them.
DECLARED = [
    (TransformerModule, TransformerConfig.field_names_of(ARCHITECTURE, TRAINING)),
    (PretrainModule, TransformerConfig.field_names_of(LANGUAGE_MODEL)),
]
UNSET_FROM_PRETRAINED = {*TransformerConfig.field_names_of(ARCHITECTURE), *HEAD_SETTINGS}
"""The settings whose ``None`` (the default) is the pretrained model's value, else the config's default."""


@pytest.mark.parametrize(("cls", "fields"), DECLARED, ids=lambda value: getattr(value, "__name__", ""))
def test_a_module_declares_each_config_field_of_its_parts_with_the_configs_type_and_default(cls, fields):
    declared = own_parameters(cls)
    assert sorted(name for name in declared if name in CONFIG_DEFAULTS) == sorted(fields)  # none missing
    types = typing.get_type_hints(cls.__init__, include_extras=True)
    for name in fields:
        config_type, default = CONFIG_TYPES[name], CONFIG_DEFAULTS[name]
        if name == "head":  # any registered head in the config; the command line lists those there were
            choices, unset = typing.get_args(types[name])
            assert unset is type(None) and typing.get_args(choices) == tuple(HEADS)[: len(typing.get_args(choices))]
            assert {"untied", "tied", "tied_orth"} <= set(typing.get_args(choices))
        elif name in UNSET_FROM_PRETRAINED:
            assert types[name] == config_type | None, name
        else:
            assert types[name] == config_type, name
        expected = None if name in UNSET_FROM_PRETRAINED else default
        assert declared[name].default == expected, name


@pytest.mark.parametrize("cls", [TransformerModule, PretrainModule, GlueModule], ids=lambda cls: cls.__name__)
def test_every_setting_is_described_and_an_unset_one_names_the_configs_default(cls):
    descriptions = documented(cls)
    private = {"_from_checkpoint"} if cls is TransformerModule else set()
    assert set(descriptions) == set(own_parameters(cls)) | private
    for name, words in descriptions.items():
        assert words.strip(), name
        if name in UNSET_FROM_PRETRAINED and cls is not GlueModule:
            default = CONFIG_DEFAULTS[name]
            if default is dataclasses.MISSING:
                assert words.endswith("Unset: the pretrained model's."), (name, words)
            else:
                said = "hidden_size" if name == "embedding_dim" else repr(default)
                assert words.endswith(f"Unset: the pretrained model's, else {said}."), (name, words)


def test_the_modules_take_every_config_field_of_their_parts_and_nothing_else():
    pretrain, glue = set(class_parameters(PretrainModule)), set(class_parameters(GlueModule))
    assert set(TransformerConfig.field_names()) <= pretrain
    assert set(TransformerConfig.field_names_of(ARCHITECTURE, TRAINING)) <= glue
    assert not set(TransformerConfig.field_names_of(LANGUAGE_MODEL)) & glue  # a classifier has no LM head
    assert "_from_checkpoint" not in pretrain | glue  # private: no option, no hyperparameter


def test_a_call_is_checked_against_the_signature():
    with pytest.raises(TypeError, match="hidden_sise"):
        PretrainModule(vocab_size=40, hidden_sise=16)
    with pytest.raises(UserError, match="vocab_size"):
        PretrainModule(hidden_size=16, num_heads=2)  # unset, and no pretrained model to take it from
    with pytest.raises(TypeError, match="head"):
        GlueModule(**TINY, num_labels=2, head="tied")  # an LM setting; a classifier has no head


def test_every_setting_is_recorded_with_its_default():
    module = PretrainModule(**TINY)
    assert set(module.hparams) == set(class_parameters(PretrainModule))
    assert module.hparams.head == "tied" and module.hparams.learning_rate == 5e-4 and module.hparams.dropout == 0.1
    glue = GlueModule(**TINY, num_labels=2)
    assert set(glue.hparams) == set(class_parameters(GlueModule))
    assert glue.hparams.hidden_size == 16 and glue.hparams.learning_rate == 2e-5


def save_checkpoint(module: TransformerModule, hparams: dict[str, Any], path) -> None:
    torch.save(
        {"state_dict": module.state_dict(), "hyper_parameters": hparams, "pytorch-lightning_version": "2.6.6"}, path
    )


class LabelSmoothed(PretrainModule):
    """A user's module: the pretraining module with one keyword of its own."""

    def __init__(self, *, label_smoothing: float = 0.0, **kwargs: Any) -> None:
        """A keyword of its own; the rest are ``PretrainModule``'s.

        Args:
            label_smoothing: The share of each target's probability spread over the vocabulary.
        """
        super().__init__(**kwargs)
        self.label_smoothing = label_smoothing


def test_a_subclass_adds_a_keyword_through_super_init(tmp_path, capsys):
    module = LabelSmoothed(label_smoothing=0.1, **TINY, head="untied", learning_rate=1e-3)
    assert module.label_smoothing == 0.1 and module.config.head == "untied" and module.config.hidden_size == 16
    assert module.hparams.label_smoothing == 0.1 and module.hparams.learning_rate == 1e-3
    assert set(module.hparams) == set(class_parameters(PretrainModule)) | {"label_smoothing"}

    path = tmp_path / "smoothed.ckpt"
    save_checkpoint(module, dict(module.hparams), path)
    loaded = LabelSmoothed.load_from_checkpoint(path)
    assert loaded.label_smoothing == 0.1 and loaded.hparams == module.hparams

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["fit", "--model.help", f"{__name__}.LabelSmoothed"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "--model.label_smoothing" in shown and "spread over the vocabulary" in shown
    assert "--model.hidden_size" in shown and "--model.head " in shown and "--model.learning_rate" in shown


def test_a_checkpoint_is_rebuilt_without_reading_its_pretrained_source(tmp_path):
    module = GlueModule(**TINY, num_labels=2)
    hparams = {**module.hparams, "pretrained": str(tmp_path / "gone.ckpt")}  # moved or deleted since
    path = tmp_path / "glue.ckpt"
    save_checkpoint(module, hparams, path)
    loaded = GlueModule.load_from_checkpoint(path)
    assert loaded.hparams.pretrained == hparams["pretrained"] and "_from_checkpoint" not in loaded.hparams
    torch.testing.assert_close(loaded.state_dict(), module.state_dict())
    with pytest.raises(UserError, match="gone.ckpt"):
        GlueModule(**{**hparams, "hidden_size": None})  # built directly, the source is read
