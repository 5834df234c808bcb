"""The last block can finish one position of every sequence only (a classifier's [CLS]): same
logits and gradients as reading that position from the full last hidden state."""

from __future__ import annotations

import pytest
import torch

from tiedemb.nn.classifier import SequenceClassifier
from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.model import Encoder


def full_state_logits(model: SequenceClassifier, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The reference: every position through every block, then [CLS]."""
    first = model.encode(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[:, 0]
    if model.pooler is not None:
        first = torch.tanh(model.pooler(first))
    return model.classifier(model.dropout(first))


@pytest.mark.parametrize("norm_position,pooler", [("post", True), ("pre", False)])
def test_logits_and_gradients_equal_the_full_last_hidden_state(norm_position, pooler):
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=60,
        hidden_size=32,
        num_layers=3,
        num_heads=4,
        intermediate_size=64,
        norm_position=norm_position,
        dropout=0.0,
        attention_dropout=0.0,
    )
    model = SequenceClassifier(config, num_labels=3, pooler=pooler)
    ids = torch.randint(5, 60, (4, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # padded rows, so attention uses the mask
    mask[3, 3:] = 0
    ids[mask == 0] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": (torch.arange(9) >= 4).long().expand(4, 9)}

    fast = model(**batch)
    fast.square().sum().backward()
    fast_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    reference = full_state_logits(model, batch)
    reference.square().sum().backward()

    assert fast.shape == (4, 3)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(fast_grads[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    "objective,position,padded", [("mlm", 0, True), ("mlm", 5, True), ("clm", 0, False), ("clm", 4, False)]
)
def test_one_position_of_every_sequence_equals_that_column_of_the_full_output(objective, position, padded):
    torch.manual_seed(1)
    config = TransformerConfig(
        vocab_size=60,
        objective=objective,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        norm_position="pre" if objective == "clm" else "post",
        position="rope" if objective == "clm" else "learned",
        dropout=0.0,
        attention_dropout=0.0,
    )
    encoder = Encoder(config)
    x = torch.randn(3, 8, 32)
    mask = torch.ones(3, 8, dtype=torch.long)
    if padded:
        mask[0, 6:] = 0
    full = encoder(x, mask)
    one = encoder(x, mask, positions=position)
    assert one.shape == (3, 32)
    torch.testing.assert_close(one, full[:, position], rtol=1e-5, atol=1e-6)
