"""Model settings are declared once, in TransformerConfig: the modules' signatures are made from it."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tiedemb import GlueModule, PretrainModule
from tiedemb.errors import UserError
from tiedemb.nn.config import ARCHITECTURE, LANGUAGE_MODEL, TRAINING, TransformerConfig

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter, TransformerConfig gains one field before anything else is imported; the
# script then asks both modules' --help, builds each with the field, and reloads it from a checkpoint.
NEW_FIELD = textwrap.dedent("""
    import contextlib, dataclasses, io, sys
    import tiedemb.nn.config as config
    from tiedemb.nn.config import setting

    @dataclasses.dataclass
    class TransformerConfig(config.TransformerConfig):
        qk_norm: bool = setting(False, doc="Normalise queries and keys (a field added for this test).")

    config.TransformerConfig = TransformerConfig  # before any module reads it

    import torch
    from tiedemb import GlueModule, PretrainModule
    from tiedemb.cli import main

    for module in ("tiedemb.PretrainModule", "tiedemb.GlueModule"):
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown), contextlib.suppress(SystemExit):
            main(["fit", "--model.help", module])
        assert "--model.qk_norm" in shown.getvalue() and "Normalise queries and keys" in shown.getvalue(), module
        print("help", module)

    tiny = dict(vocab_size=40, hidden_size=16, num_heads=2, num_layers=1, intermediate_size=32, qk_norm=True)
    for cls, extra in ((PretrainModule, {}), (GlueModule, {"num_labels": 2})):
        module = cls(**tiny, **extra)
        assert module.hparams.qk_norm is True and module.config.qk_norm is True
        path = sys.argv[1] + f"/{cls.__name__}.ckpt"
        # As LightningCLI saves hyperparameters: with the class path and its instantiator
        hparams = {"_class_path": f"tiedemb.{cls.__name__}", **module.hparams,
                   "_instantiator": "lightning.pytorch.cli.instantiate_module"}
        torch.save({"state_dict": module.state_dict(), "hyper_parameters": hparams,
                    "pytorch-lightning_version": "2.6.6"}, path)
        loaded = cls.load_from_checkpoint(path)
        assert loaded.hparams.qk_norm is True and loaded.config.qk_norm is True, cls
        print("checkpoint", cls.__name__)
""")


@pytest.mark.end_to_end
def test_a_field_added_to_the_config_reaches_both_modules_help_and_checkpoints(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", NEW_FIELD, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:4] == [
        "help tiedemb.PretrainModule",
        "help tiedemb.GlueModule",
        "checkpoint PretrainModule",
        "checkpoint GlueModule",
    ]


def test_signatures_list_the_config_fields_of_their_parts_then_their_own_settings():
    pretrain = list(inspect.signature(PretrainModule).parameters)
    assert pretrain[: len(TransformerConfig.field_names())] == TransformerConfig.field_names()
    assert pretrain[len(TransformerConfig.field_names()) :][:2] == ["learning_rate", "weight_decay"]
    glue = inspect.signature(GlueModule).parameters
    fine_tuned = TransformerConfig.field_names_of(ARCHITECTURE, TRAINING)
    assert list(glue)[: len(fine_tuned)] == fine_tuned
    assert not set(TransformerConfig.field_names_of(LANGUAGE_MODEL)) & set(glue)  # a classifier has no LM head
    # architecture fields are the pretrained model's when unset; training fields have the config's defaults
    assert all(glue[name].default is None for name in TransformerConfig.field_names_of(ARCHITECTURE))
    assert glue["dropout"].default == 0.1 and glue["init_std"].default == 0.02


def test_a_call_is_checked_against_the_made_signature():
    with pytest.raises(TypeError, match="hidden_sise"):
        PretrainModule(vocab_size=40, hidden_sise=16)
    with pytest.raises(UserError, match="vocab_size"):
        PretrainModule(hidden_size=16, num_heads=2)  # unset, and no pretrained model to take it from
    with pytest.raises(TypeError, match="head"):
        GlueModule(vocab_size=40, num_labels=2, head="tied")  # an LM setting; a classifier has no head


def test_settings_are_recorded_in_signature_order_with_defaults():
    module = PretrainModule(vocab_size=40, hidden_size=16, num_heads=2, num_layers=1, intermediate_size=32)
    assert list(module.hparams) == list(inspect.signature(PretrainModule).parameters)
    assert module.hparams.head == "tied" and module.hparams.learning_rate == 5e-4


def test_choices_are_literal_types_the_help_lists():
    """``--help`` and shell completion read the choices from the signature, so they must be there."""
    import typing

    from tiedemb.nn import HEADS

    parameters = inspect.signature(PretrainModule.__init__).parameters
    assert typing.get_args(parameters["objective"].annotation) == ("mlm", "clm")
    assert typing.get_args(parameters["lr_decay"].annotation) == ("linear", "cosine", "constant")
    head_choices = [typing.get_args(option) for option in typing.get_args(parameters["head"].annotation)]
    assert tuple(HEADS) in head_choices  # Literal[registered heads] | None: unset takes the pretrained head
    glue = inspect.signature(GlueModule.__init__).parameters
    assert typing.get_args(glue["norm"].annotation)[0] == typing.Literal["layernorm", "rmsnorm"]
    with pytest.raises(
        UserError, match=r"model\.lr_decay='step' is not a known choice; valid: linear, cosine, constant"
    ):
        PretrainModule(vocab_size=50, hidden_size=16, num_heads=2, num_layers=1, lr_decay="step")
