"""The wider field's remedies (T5, Gemma, muP): scale settings, their configs, and the theory's predictions."""

from __future__ import annotations

import contextlib
import functools
import io
import math
from pathlib import Path

import pytest
import torch
import yaml

from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.nn import Transformer, TransformerConfig
from tiedemb.nn.config import resolve_scale
from tiedemb.theory import predict_for_config, predict_initial_loss

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
REMEDIES = ("tied_t5", "tied_gemma", "tied_mup")


def test_scale_keywords():
    assert resolve_scale("sqrt_d", 256) == 16.0
    assert resolve_scale("rsqrt_d", 256) == 1 / 16
    assert resolve_scale("mup:64", 256) == 0.25
    assert resolve_scale(0.5, 256) == 0.5 and resolve_scale("2", 8) == 2.0
    for bad in ("huge", "mup:x", -1.0, 0, True):
        with pytest.raises(ValueError):
            resolve_scale(bad, 8)


def test_bad_scale_settings_are_user_errors_naming_the_field():
    with pytest.raises(UserError, match="model.output_scale='huge'"):
        TransformerConfig(vocab_size=50, hidden_size=16, num_heads=2, output_scale="huge")


def test_scales_leave_parameter_names_and_the_tie_alone():
    plain = Transformer(TransformerConfig(vocab_size=50, hidden_size=16, num_heads=2, num_layers=1))
    scaled = Transformer(
        TransformerConfig(
            vocab_size=50,
            hidden_size=16,
            num_heads=2,
            num_layers=1,
            embedding_scale="sqrt_d",
            output_scale="rsqrt_d",
            embedding_init_std=1.0,
        )
    )
    assert list(plain.state_dict()) == list(scaled.state_dict()) and scaled.is_tied
    assert scaled.embedding.token.weight.std().item() == pytest.approx(1.0, rel=0.1)


def test_the_predictions_of_the_field_at_bert_base():
    base = dict(vocab_size=30522, hidden_size=768, objective="clm")
    # T5: std 1 and x d^-1/2 -> self logit sqrt(d) = 27.7, as sigma = 1/sqrt(d) untransformed
    t5 = predict_initial_loss(**base, embedding_init_std=1.0, output_scale=1 / math.sqrt(768))
    assert t5.self_logit == pytest.approx(math.sqrt(768)) and t5.loss == pytest.approx(27.7, abs=0.05)
    # muP at 1/12 of the width: the self logit shrinks 12-fold, the start is near ln n
    mup = predict_initial_loss(**base, output_scale=64 / 768)
    assert mup.self_logit == pytest.approx(768 * 0.02 / 12) and mup.loss == pytest.approx(math.log(30522), abs=0.1)
    # Gemma behind a norm: no change without additive positions, the full effect back with them
    rope = predict_initial_loss(**base, position="rope")
    assert predict_initial_loss(**base, position="rope", embedding_scale=math.sqrt(768)).loss == pytest.approx(
        rope.loss
    )
    learned = predict_initial_loss(**base, position="learned", type_vocab_size=2)
    gemma = predict_initial_loss(**base, position="learned", type_vocab_size=2, embedding_scale=math.sqrt(768))
    assert learned.loss < rope.loss - 4 and gemma.loss == pytest.approx(rope.loss, abs=0.05)


def measured_initial_loss(config: TransformerConfig, batch: int = 8, length: int = 64) -> float:
    """CLM loss of a fresh model on uniformly random tokens (no repeats to speak of)."""
    torch.manual_seed(1)
    model = Transformer(config).eval()
    ids = torch.randint(5, config.vocab_size, (batch, length))
    with torch.no_grad():
        return model(ids, labels=ids).loss.item()


@functools.cache
def remedy_settings(name: str) -> dict:
    """The model settings a variant config resolves to: the study's recipe with the variant's lines."""
    with contextlib.redirect_stdout(io.StringIO()) as printed, pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), "--print_config"])
    model = yaml.safe_load(printed.getvalue())["model"]["init_args"]
    fields = set(TransformerConfig.field_names())
    # unset (null) settings are the config's defaults when nothing is pretrained
    return {key: value for key, value in model.items() if key in fields and value is not None}


@pytest.mark.parametrize("name", REMEDIES)
@pytest.mark.parametrize("position,segments,d_e", [("rope", 0, None), ("learned", 2, None), ("rope", 0, 64)])
def test_predictor_matches_measured_initial_loss_of_each_remedy_config(name, position, segments, d_e):
    settings = {
        **remedy_settings(name),
        "vocab_size": 4096,
        "num_layers": 2,
        "objective": "clm",
        "position": position,
        "type_vocab_size": segments,
        "embedding_dim": d_e,
    }
    config = TransformerConfig(**settings)
    assert measured_initial_loss(config) == pytest.approx(predict_for_config(config).loss, rel=0.03, abs=0.15)


def test_remedy_configs_differ_from_tied_only_in_their_settings():
    tied = remedy_settings("tied")
    # T5 and Gemma have no norm after the embedding: their input scales reach the residual stream
    expected = {
        "tied_t5": {"embedding_init_std": 1.0, "output_scale": "rsqrt_d", "embedding_norm": False},
        "tied_gemma": {"embedding_scale": "sqrt_d", "embedding_norm": False},
        "tied_mup": {"output_scale": "mup:64"},
    }
    for name, changes in expected.items():
        settings = remedy_settings(name)
        assert {key: value for key, value in settings.items() if tied.get(key) != value} == changes
