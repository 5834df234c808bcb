"""A head added outside the package: one class registered under a new name, nothing else changed.

The class below is all there is to the ``tied_negated`` head: its name, its forward (logits =
-h E^T), and its theory hook. The config, the model, the initial-loss predictor and training then
take it by name.
"""

from __future__ import annotations

import pytest
import torch

from tiedemb.nn import HEADS, Transformer, TransformerConfig
from tiedemb.nn.heads import FreshReadout, TiedHead
from tiedemb.theory import predict_for_config


@pytest.fixture
def negated_head():
    class TiedNegatedHead(TiedHead, name="tied_negated"):
        """Tied, with the scores negated: the input token starts as the least likely next token."""

        def transform(self, hidden):
            return -super().transform(hidden)

        @classmethod
        def initial_logits(cls, readout: FreshReadout) -> tuple[float, float]:
            self_logit, logit_var = super().initial_logits(readout)
            return -self_logit, logit_var

    yield TiedNegatedHead
    del HEADS["tied_negated"]  # the registry is the process's: leave it as the other tests expect it


def config(head: str) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=4096,
        hidden_size=256,
        num_layers=2,
        num_heads=4,
        intermediate_size=512,
        init_std=0.05,
        objective="clm",
        position="rope",
        type_vocab_size=0,
        head=head,
        norm_position="pre",
        residual_init="zero",
        dropout=0.0,
        attention_dropout=0.0,
    )


def test_a_head_registered_in_a_test_builds_predicts_and_trains(negated_head):
    model = Transformer(config("tied_negated"))
    assert type(model.head) is negated_head and model.is_tied
    torch.manual_seed(1)
    ids = torch.randint(5, 4096, (8, 64))
    # Repeats (target = input) are what the sign changes: a fresh tied model scores its input
    # token far above the rest, the negated one far below.
    repeats = torch.cat((ids[:, :32], ids[:, :32]), dim=1)
    repeats[:, 1::2] = repeats[:, 0::2]
    with torch.no_grad():
        measured = model.eval()(repeats, labels=repeats).loss.item()
    # Half the targets repeat their input token.
    predicted = predict_for_config(config("tied_negated"), repeat_rate=0.5).loss
    tied = predict_for_config(config("tied"), repeat_rate=0.5).loss
    assert measured == pytest.approx(predicted, rel=0.03, abs=0.15)
    assert abs(predicted - tied) > 1.0  # the hook, not the plain tied head's, made the prediction

    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        loss = model(ids, labels=ids, return_logits=False).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert model.head.decoder.weight is model.embedding.token.weight  # still one matrix after training


def test_the_pretraining_module_takes_a_head_registered_after_it(negated_head):
    from tiedemb import PretrainModule

    settings = {k: v for k, v in config("tied_negated").to_dict().items() if k != "embedding_dim"}
    module = PretrainModule(**settings)
    assert type(module.model.head) is negated_head
    assert predict_for_config(module.config).loss == predict_for_config(config("tied_negated")).loss
    ids = torch.randint(5, 4096, (2, 16))
    module(ids, labels=ids, return_logits=False).loss.backward()
    assert module.model.embedding.token.weight.grad is not None
