"""The CPU dropout mask: its rate, its independence, and the attention written out around it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tiedemb.nn.fast.dropout import Dropout, attention, dropout, keep_mask

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


def _reference(q, k, v, allowed, keep, p):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.where(keep, torch.softmax(scores, -1) / (1 - p), torch.zeros(())) @ v


@pytest.mark.parametrize("case", ["plain", "padded", "causal"])
def test_attention_with_dropout_is_the_formula_with_the_drawn_mask(case):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, requires_grad=True) for _ in range(3))
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    attn_mask = padding if case == "padded" else None
    allowed = {
        "plain": torch.ones(6, 6, dtype=torch.bool),
        "padded": padding,
        "causal": torch.ones(6, 6, dtype=torch.bool).tril(),
    }[case]
    torch.manual_seed(5)
    ours = attention(q, k, v, attn_mask, 0.2, is_causal=case == "causal")
    torch.manual_seed(5)
    keep = keep_mask(torch.Size([2, 3, 6, 6]), 0.2)
    reference = _reference(q, k, v, allowed, keep, 0.2)
    assert torch.allclose(ours, reference, atol=1e-6)
    grads = torch.autograd.grad(ours.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference.square().sum(), (q, k, v))
    for got, want in zip(grads, expected):
        assert torch.allclose(got, want, atol=1e-5)


def test_attention_without_dropout_is_torchs():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4) for _ in range(3))
    assert torch.equal(
        attention(q, k, v, None, 0.0, is_causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )


@pytest.mark.parametrize("causal", [False, True])
def test_attention_under_bf16_autocast_keeps_the_value_dtype(causal):
    q, k, v = (torch.randn(2, 3, 6, 4) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, 0.1, is_causal=causal)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()
    if causal:  # the first query sees the first key only: its output is that value (or 0, dropped)
        first = y[..., 0, :].float()
        kept = v[..., 0, :].bfloat16().float() / 0.9
        assert torch.all(torch.isclose(first, kept, rtol=1e-2) | (first == 0))
