"""The sliced linear cross-entropy equals the plain one, loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tiedemb.nn.fast import sliced_loss as loss_module
from tiedemb.nn.fast.sliced_loss import linear_cross_entropy


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


@pytest.mark.parametrize("autocast", [False, True])
def test_targets_far_below_the_best_word_keep_their_loss(monkeypatch, autocast):
    """Rows whose target's probability underflows float32 (here ~e^-400) still get the exact loss:
    the log of the probability alone would be -inf, so those rows are recomputed."""
    monkeypatch.setattr(loss_module, "SLICE_ELEMENTS", 50 * 8)  # several slices, some without such rows
    x, weight, b, targets = _inputs()
    with torch.no_grad():
        x.mul_(40.0)  # logits spread over hundreds of nats
    logits = F.linear(x, weight, b).detach()
    far = torch.arange(0, x.shape[0], 3)
    targets[far] = logits[far].argmin(dim=1)  # the least likely word: probability 0 in float32
    assert (torch.softmax(logits, 1).gather(1, targets.clamp(min=0)[:, None])[far] == 0).any()
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with context:
        got = linear_cross_entropy(x, weight, b, targets)
        expected = F.cross_entropy(F.linear(x, weight, b).float(), targets, ignore_index=-100)
    assert torch.isfinite(got)
    torch.testing.assert_close(got, expected, rtol=2e-2 if autocast else 1.3e-6, atol=0.0)
    if not autocast:  # in bf16, gradients of logits this far apart agree to a few percent only (scale: above)
        for ours, reference in zip(_grads(got, (x, weight, b)), _grads(expected, (x, weight, b))):
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


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("slice_rows", [7, 1 << 20])
def test_sliced_loss_under_bf16_autocast_matches_full_logits(monkeypatch, bias, slice_rows):
    """Under CPU bf16 autocast the sliced loss no longer falls back to full logits, and equals
    the full-logits loss (bf16 product, float32 cross-entropy) within bf16 rounding; so do the
    gradients, which come back in the inputs' dtypes."""
    x, weight, b, targets = _inputs(rows=64, width=32, vocab=300, bias=bias)
    built = []
    original_linear = F.linear
    monkeypatch.setattr(loss_module.F, "linear", lambda *a, **k: built.append(1) or original_linear(*a, **k))
    monkeypatch.setattr(loss_module, "SLICE_ELEMENTS", slice_rows * 300)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sliced = linear_cross_entropy(x, weight, b, targets)
    assert not built  # no full logits
    sliced_grads = _grads(sliced, (x, weight, b))
    monkeypatch.setattr(loss_module.F, "linear", original_linear)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(x, weight, b)
    reference = F.cross_entropy(logits.float(), targets, ignore_index=-100)
    reference_grads = _grads(reference, (x, weight, b))
    exact = F.cross_entropy(F.linear(x, weight, b), targets, ignore_index=-100)  # float32 throughout
    exact_grads = _grads(exact, (x, weight, b))
    assert sliced.dtype == torch.float32
    assert sliced.item() == pytest.approx(reference.item(), rel=2e-3)
    assert sliced.item() == pytest.approx(exact.item(), rel=2e-3)
    inputs = [t for t in (x, weight, b) if t is not None]
    for ours, theirs, truth, original in zip(sliced_grads, reference_grads, exact_grads, inputs):
        assert ours.dtype == original.dtype
        scale = truth.abs().max().item()
        ours_error, theirs_error = ((g - truth).abs().max().item() / scale for g in (ours, theirs))
        assert ours_error <= 2e-2  # bf16 keeps about 3 significant digits
        assert ours_error <= 1.25 * theirs_error + 1e-3  # no worse than building the bf16 logits
