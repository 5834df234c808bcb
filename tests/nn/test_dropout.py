"""The CPU dropout mask: its rate, its independence and its gradient."""

from __future__ import annotations

import pytest
import torch

from tiedemb.nn.fast.dropout import Dropout, dropout, keep_mask

N = 1 << 21


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_every_entry_is_kept_with_probability_one_minus_p(p):
    torch.manual_seed(0)
    keep = keep_mask(torch.Size([N + 1]), p).float()  # odd: the last word is half used
    tolerance = 5 * (p * (1 - p) / (N / 2)) ** 0.5
    # Even and odd entries come from the low and the high half of each random word.
    for half in (keep[0::2], keep[1::2]):
        assert half.mean().item() == pytest.approx(1 - p, abs=tolerance)
    # Neighbours (the two halves of one word, and adjacent words) are independent.
    both_kept = (keep[:-1] * keep[1:]).mean().item()
    assert both_kept == pytest.approx((1 - p) ** 2, abs=tolerance)


def test_the_rate_is_exact_to_the_word_size():
    torch.manual_seed(0)
    assert keep_mask(torch.Size([1000]), 0.0).all()
    assert not keep_mask(torch.Size([1000]), 1.0).any()
    assert keep_mask(torch.Size([3, 5, 7]), 0.3).shape == (3, 5, 7)


def test_dropout_scales_what_it_keeps_and_its_gradient_is_the_same_mask():
    x = torch.randn(64, 33, requires_grad=True)
    torch.manual_seed(1)
    y = dropout(x, 0.25)
    torch.manual_seed(1)
    keep = keep_mask(x.shape, 0.25)
    assert torch.allclose(y, torch.where(keep, x / 0.75, torch.zeros(())))
    grad = torch.randn_like(x)
    y.backward(grad)
    assert torch.allclose(x.grad, torch.where(keep, grad / 0.75, torch.zeros(())))


def test_dropout_is_the_identity_when_evaluating_or_at_zero():
    x = torch.randn(8, 8)
    layer = Dropout(0.5).eval()
    assert layer(x) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    assert Dropout(0.5).state_dict() == {}
