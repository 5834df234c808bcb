"""The initial-loss predictor against fresh models measured on random token streams."""

import math

import pytest
import torch

from tiedemb.data.collate import MaskingCollator
from tiedemb.nn import Transformer, TransformerConfig
from tiedemb.theory import predict_for_config, predict_initial_loss


def test_reference_figures_from_the_science_notes():
    tied = lambda sigma: predict_initial_loss(vocab_size=30522, hidden_size=768, init_std=sigma).loss  # noqa: E731
    assert tied(0.02) == pytest.approx(15.37, abs=0.01)
    assert tied(1 / math.sqrt(768)) == pytest.approx(27.7, abs=0.05)
    assert tied(1.0) == pytest.approx(768.0, abs=0.01)
    scaled = predict_initial_loss(vocab_size=30522, hidden_size=768, head="tied_scaled_init")
    assert scaled.self_logit == pytest.approx(math.log(30522))
    assert scaled.loss == pytest.approx(math.log(2 * 30522 - 1), abs=0.1)
    for head in ("untied", "tied_orth", "tied_shuffle"):
        assert predict_initial_loss(vocab_size=30522, hidden_size=768, head=head).loss == pytest.approx(
            math.log(30522), abs=0.2
        )


def test_mlm_keeps_ten_percent_of_targets_as_inputs():
    clm = predict_initial_loss(vocab_size=30522, hidden_size=768, objective="clm")
    mlm = predict_initial_loss(vocab_size=30522, hidden_size=768, objective="mlm")
    assert mlm.loss == pytest.approx(0.9 * clm.loss_other + 0.1 * clm.loss_same)
    assert mlm.loss == pytest.approx(0.9 * 15.37, abs=0.05)


def measured_initial_loss(config: TransformerConfig, batch: int = 8, length: int = 64) -> float:
    torch.manual_seed(1)
    model = Transformer(config).eval()
    ids = torch.randint(5, config.vocab_size, (batch, length))
    if config.objective == "mlm":
        collator = MaskingCollator(
            config.vocab_size,
            mask_token_id=4,
            pad_token_id=0,
            special_token_ids=range(5),
            probability=0.5,
            generator=torch.Generator().manual_seed(2),
        )
        inputs, labels = collator.mask(ids)
    else:
        inputs, labels = ids, ids
    with torch.no_grad():
        return model(inputs, labels=labels).loss.item()


SETTINGS = [
    # (vocab, hidden, d_e, sigma, objective, position, segments)
    (4096, 128, None, 0.02, "clm", "rope", 0),
    (4096, 256, None, 0.05, "clm", "rope", 0),
    (20000, 256, None, 0.02, "mlm", "rope", 0),
    (4096, 256, None, 0.04, "mlm", "none", 0),
    (4096, 256, None, 0.05, "clm", "learned", 2),
    (8000, 256, 64, 0.05, "clm", "rope", 0),
]


@pytest.mark.parametrize("vocab,hidden,d_e,sigma,objective,position,segments", SETTINGS)
@pytest.mark.parametrize("head", ["tied", "untied", "tied_scaled_init", "tied_orth", "tied_shuffle"])
def test_predictor_matches_measured_initial_loss(vocab, hidden, d_e, sigma, objective, position, segments, head):
    config = TransformerConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        embedding_dim=d_e,
        num_layers=2,
        num_heads=4,
        intermediate_size=2 * hidden,
        init_std=sigma,
        objective=objective,
        position=position,
        type_vocab_size=segments,
        head=head,
        norm_position="pre",
        residual_init="zero",
        dropout=0.0,
        attention_dropout=0.0,
    )
    predicted = predict_for_config(config).loss
    measured = measured_initial_loss(config)
    assert measured == pytest.approx(predicted, rel=0.03, abs=0.15)
