"""The sliced linear cross-entropy equals the plain one, loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tiedemb.nn import loss as loss_module
from tiedemb.nn.loss import linear_cross_entropy


def _inputs(rows: int = 37, width: int = 12, vocab: int = 50, bias: bool = True, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=generator, requires_grad=True)
    weight = torch.randn(vocab, width, generator=generator, requires_grad=True)
    b = torch.randn(vocab, generator=generator, requires_grad=True) if bias else None
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    targets[::5] = -100
    return x, weight, b, targets


def _grads(loss: torch.Tensor, tensors) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, [t for t in tensors if t is not None]))


@pytest.mark.parametrize("vocab", [50, 48])  # padded to 64 columns internally; already aligned
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("slice_rows", [4, 37, 1 << 20])  # uneven slices, exactly one, one big
def test_sliced_equals_plain_cross_entropy(monkeypatch, vocab, bias, slice_rows):
    monkeypatch.setattr(loss_module, "SLICE_ELEMENTS", vocab * slice_rows)
    x, weight, b, targets = _inputs(vocab=vocab, bias=bias)
    expected = F.cross_entropy(F.linear(x, weight, b), targets, ignore_index=-100)
    got = linear_cross_entropy(x, weight, b, targets)
    torch.testing.assert_close(got, expected)
    for ours, reference in zip(_grads(2.5 * got, (x, weight, b)), _grads(2.5 * expected, (x, weight, b))):
        torch.testing.assert_close(ours, reference)


def test_without_gradients_only_the_loss_is_computed():
    x, weight, b, targets = _inputs()
    with torch.no_grad():
        got = linear_cross_entropy(x, weight, b, targets)
    assert not got.requires_grad
    torch.testing.assert_close(got, F.cross_entropy(F.linear(x, weight, b), targets, ignore_index=-100).detach())


def test_no_targets_gives_zero_loss_and_zero_gradients():
    x, weight, b, targets = _inputs()
    got = linear_cross_entropy(x, weight, b, torch.full_like(targets, -100))
    assert got.item() == 0.0
    assert all(g.abs().max() == 0 for g in _grads(got, (x, weight, b)))


def test_other_dtypes_take_the_plain_path():
    x, weight, b, targets = _inputs()
    x16, w16, b16 = (t.detach().bfloat16().requires_grad_() for t in (x, weight, b))
    got = linear_cross_entropy(x16, w16, b16, targets)
    expected = F.cross_entropy(F.linear(x16, w16, b16).float(), targets, ignore_index=-100)
    torch.testing.assert_close(got, expected)


def test_a_second_backward_is_refused_with_the_way_out():
    x, weight, b, targets = _inputs()
    loss = linear_cross_entropy(x, weight, b, targets)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="return_logits=True"):
        loss.backward()
