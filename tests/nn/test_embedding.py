"""The embedding's optional parts: the d_e -> hidden projection at full width, and the norm after it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from tiedemb.nn import Transformer, TransformerConfig
from tiedemb.theory import predict_for_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SMALL = dict(vocab_size=512, hidden_size=64, num_heads=2, num_layers=2, intermediate_size=128)
PREMISE = dict(
    objective="clm",
    position="rope",
    type_vocab_size=0,
    norm_position="pre",
    residual_init="zero",
    dropout=0.0,
    attention_dropout=0.0,
)


def test_projection_at_full_width_only_when_asked():
    auto = Transformer(TransformerConfig(**SMALL))
    always = Transformer(TransformerConfig(**SMALL, embedding_projection="always"))
    assert auto.embedding.projection is None and auto.head.down is None
    assert always.embedding.projection.weight.shape == (64, 64)
    # the plain tied head's down-map starts as the projection's transpose, as at d_e < hidden
    assert torch.equal(always.head.down.weight, always.embedding.projection.weight.T)
    narrow = Transformer(TransformerConfig(**SMALL, embedding_dim=16))
    assert narrow.embedding.projection.weight.shape == (64, 16)


def width_study_settings() -> dict:
    init_args = yaml.safe_load((CONFIGS / "width" / "bert_cpu.yaml").read_text())["model"]["init_args"]
    fields = set(TransformerConfig.field_names())
    return {key: value for key, value in init_args.items() if key in fields}


def test_width_study_projects_at_every_width_and_auto_removes_it_at_full_width():
    settings = {**width_study_settings(), "vocab_size": 512}
    assert settings["embedding_dim"] == settings["hidden_size"]  # the config's own width is the full one
    full = Transformer(TransformerConfig(**settings))
    assert full.embedding.projection is not None
    identity = Transformer(TransformerConfig(**{**settings, "embedding_projection": "auto"}))
    assert identity.embedding.projection is None
    names = set(full.state_dict()) - set(identity.state_dict())
    assert names == {"embedding.projection.weight"}


@pytest.mark.parametrize("head", ["tied", "tied_orth", "untied"])
def test_predicted_initial_loss_with_a_full_width_projection(head):
    config = TransformerConfig(
        **{
            **SMALL,
            **PREMISE,
            "vocab_size": 4096,
            "hidden_size": 128,
            "num_heads": 4,
            "embedding_init_std": 0.12,
            "head": head,
            "embedding_projection": "always",
        }
    )
    assert measured_clm_loss(config) == pytest.approx(predict_for_config(config).loss, rel=0.03, abs=0.15)


def measured_clm_loss(config: TransformerConfig) -> float:
    torch.manual_seed(0)
    model = Transformer(config).eval()
    ids = torch.randint(5, config.vocab_size, (8, 64))
    labels = torch.randint(5, config.vocab_size, (8, 64))  # the next token is almost never the input token
    with torch.no_grad():
        return model(ids, labels=labels).loss.item()


def test_without_the_embedding_norm_the_input_scale_reaches_the_residual_stream():
    """Gemma's sqrt(d) on a table of std sigma: the stream's rms is sqrt(d) * sigma without the
    norm, and 1 with it (the norm undoes any input scale)."""
    settings = {**SMALL, **PREMISE, "embedding_init_std": 0.05, "embedding_scale": "sqrt_d"}
    ids = torch.randint(5, 512, (4, 32))
    with torch.no_grad():
        plain = Transformer(TransformerConfig(**settings, embedding_norm=False)).embedding(ids)
        normed = Transformer(TransformerConfig(**settings)).embedding(ids)
    assert plain.pow(2).mean().sqrt().item() == pytest.approx(math.sqrt(64) * 0.05, rel=0.05)
    assert normed.pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=0.01)


@pytest.mark.parametrize(
    "remedy", [dict(embedding_scale="sqrt_d"), dict(embedding_init_std=1.0, output_scale="rsqrt_d")]
)
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_embedding_norm_leaves_the_initial_loss_where_the_theory_puts_it(remedy, norm_position):
    """Near-identity branches: the final norm (pre-norm) or the block norms (post-norm) normalise the
    stream whether or not the embedding has its own norm, so the theory predicts the same start
    for both; the measured starts agree with it and with each other."""
    base = {
        **SMALL,
        **PREMISE,
        "vocab_size": 4096,
        "hidden_size": 128,
        "num_heads": 4,
        "embedding_init_std": 0.12,
        "norm_position": norm_position,
        **remedy,
    }
    with_norm, without = TransformerConfig(**base), TransformerConfig(**base, embedding_norm=False)
    predicted = predict_for_config(without).loss
    assert predicted == pytest.approx(predict_for_config(with_norm).loss)
    assert measured_clm_loss(without) == pytest.approx(predicted, rel=0.03, abs=0.15)
    assert measured_clm_loss(without) == pytest.approx(measured_clm_loss(with_norm), abs=0.05)
