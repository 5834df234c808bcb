"""Cross-entropy of a linear readout, ``F.cross_entropy(x @ W.T + b, targets, ignore_index=-100)``,
without building the (rows, vocab) logits.

Built whole, the logits, their log-softmax and the two gradients each fill a fresh rows x vocab buffer
every step. Here a slice of rows at a time becomes its share of the loss and of the gradients for x, W
and b, in one reused buffer; the backward only scales what the forward computed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from tiedemb.nn.layers import IGNORE_INDEX

# fp32 logits per slice: 128 MiB (1099 rows of 30522 words). Each slice re-packs the weight and re-reads
# its whole gradient, so fewer, larger slices win (benchmarks/RESULTS.md compares sizes).
SLICE_ELEMENTS = 1 << 25


def linear_cross_entropy(x: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor) -> Tensor:
    """Mean cross-entropy of ``x @ weight.T + bias`` against ``targets`` (-100: no target).

    x: (rows, width); weight: (vocab, width); targets: (rows,). Sliced for float32 parameters,
    with the products in the autocast dtype under autocast; other parameter dtypes (a model cast
    to bf16 as a whole) build the logits as usual.
    """
    device = x.device.type
    autocast = torch.is_autocast_enabled(device)
    if weight.dtype != torch.float32 or (x.dtype != torch.float32 and not autocast):
        logits = F.linear(x, weight, bias)
        return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)
    compute_dtype = torch.get_autocast_dtype(device) if autocast else torch.float32
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    # The function manages its own dtypes: autocast must not recast inside it.
    with torch.autocast(device, enabled=False):
        return _SlicedLinearCrossEntropy.apply(x, weight, bias, targets, needs_grad, compute_dtype)


class _SlicedLinearCrossEntropy(torch.autograd.Function):
    """Under autocast the products run in the autocast dtype, as ``F.linear`` would; each slice's
    softmax (the log-sum-exp of 30k terms would lose the loss's digits in bf16), the loss and the
    gradients accumulate in float32."""

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        needs_grad: bool,
        compute_dtype: torch.dtype,
    ) -> Tensor:
        total_rows, vocab = x.shape[0], weight.shape[0]
        exact = compute_dtype == torch.float32  # products straight into float32 buffers
        # Ignored rows weigh 0, which also zeroes their gradients; with no target at all the loss is
        # 0 (F.cross_entropy would give nan). Slices are made equal: a short last one would cost a
        # whole pass over the weight gradient for a few rows.
        valid = targets != IGNORE_INDEX
        row_weight = valid.float() / valid.sum().clamp(min=1)
        safe_targets = targets.masked_fill(~valid, 0)
        slices = -(-total_rows // max(1, SLICE_ELEMENTS // vocab))
        rows = -(-total_rows // slices)
        needs_x, needs_weight, needs_bias = (needs_grad and ctx.needs_input_grad[i] for i in range(3))
        needs_bias = needs_bias and bias is not None
        low_x, low_weight = x.to(compute_dtype), weight.to(compute_dtype)  # themselves in float32
        grad_x = torch.empty(x.shape, device=x.device) if needs_x else None
        grad_weight = torch.empty(weight.shape, device=x.device) if needs_weight else None
        grad_bias = torch.empty(vocab, device=x.device) if needs_bias else None
        loss = torch.zeros((), device=x.device)
        # Rows padded to a multiple of 16 floats (64 bytes): a product writing unaligned rows (30522
        # floats) is markedly slower than one writing aligned rows. The padding columns
        # hold -inf logits, so the softmax over the padded row is the one over the vocabulary
        # and their probabilities, hence gradients, are exactly 0.
        logits_buffer = _buffer(x.device, rows, -(-vocab // 16) * 16)
        for start in range(0, total_rows, rows):
            stop = min(start + rows, total_rows)
            count = stop - start
            accumulate = 0 if start == 0 else 1  # the first slice writes the weight and bias gradients
            chunk, chunk_targets, chunk_weight = low_x[start:stop], safe_targets[start:stop], row_weight[start:stop]
            logits = logits_buffer[:count]
            logits[:, vocab:] = float("-inf")
            if not exact:
                logits[:, :vocab] = torch.mm(chunk, low_weight.t())
                if bias is not None:
                    logits[:, :vocab] += bias.float()
            elif bias is None:
                torch.mm(chunk, weight.t(), out=logits[:, :vocab])
            else:
                torch.addmm(bias, chunk, weight.t(), out=logits[:, :vocab])
            picked = _probabilities_in_place(
                logits, chunk_targets, lambda r, chunk=chunk: _row_logits(chunk[r], low_weight, bias)
            )
            loss -= picked.dot(chunk_weight)
            if not (needs_x or needs_weight or needs_bias):
                continue
            # d loss / d logits = row_weight * (softmax - one_hot); row_weight is applied to the
            # (count, width) factors instead of the (count, vocab) matrix.
            logits[torch.arange(count, device=x.device), chunk_targets] -= 1.0
            grad_logits = logits[:, :vocab].to(compute_dtype)
            if needs_x and exact:
                torch.mm(grad_logits, weight, out=grad_x[start:stop])
            elif needs_x:
                grad_x[start:stop] = torch.mm(grad_logits, low_weight)
            if needs_x:
                grad_x[start:stop] *= chunk_weight[:, None]
            scaled = chunk * chunk_weight[:, None].to(compute_dtype) if needs_weight else None
            if needs_weight and exact:
                torch.addmm(grad_weight, grad_logits.t(), scaled, beta=accumulate, out=grad_weight)
            elif needs_weight and accumulate:
                grad_weight += torch.mm(grad_logits.t(), scaled)
            elif needs_weight:
                grad_weight.copy_(torch.mm(grad_logits.t(), scaled))
            if grad_bias is not None:
                torch.addmv(grad_bias, logits[:, :vocab].t(), chunk_weight, beta=accumulate, out=grad_bias)
        ctx.grads = tuple(
            None if grad is None else grad.to(like.dtype)
            for grad, like in ((grad_x, x), (grad_weight, weight), (grad_bias, bias))
        )
        return loss

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        if ctx.grads is None:
            raise RuntimeError(
                "the sliced cross-entropy hands its gradients over once; to backpropagate through it "
                "twice, compute the loss from logits (return_logits=True)"
            )
        grads, ctx.grads = ctx.grads, None
        # Scaled in place: they are handed over, not kept. ``loss.backward()`` passes exactly 1,
        # which on a CPU (where reading it costs no device synchronisation) skips a pass over them.
        if not (grad_loss.device.type == "cpu" and grad_loss.item() == 1.0):
            grads = tuple(None if g is None else g.mul_(grad_loss.to(g.dtype)) for g in grads)
        return (*grads, None, None, None)


def _row_logits(rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """Some rows' float32 logits again, as their slice's were made."""
    logits = torch.mm(rows, weight.t()).float()
    return logits if bias is None else logits + bias.float()


# A target probability below this has its logarithm recomputed from the row's log-softmax: near
# float32's smallest normal number (1.2e-38) the probability itself has lost digits.
_TINY_PROBABILITY = 1e-30


def _probabilities_in_place(logits: Tensor, targets: Tensor, row_logits: Callable[[Tensor], Tensor]) -> Tensor:
    """Turn a slice's logits into probabilities in place; return the log-probability of each row's target.

    On the CPU the softmax is one pass and the targets' log-probabilities the logarithms of their
    probabilities (a log-softmax then ``exp`` would pass over the slice, far larger than the caches,
    twice); a row whose target lies more than ~69 nats below its log-sum-exp is recomputed exactly
    from ``row_logits(rows)``. On GPUs, where the extra pass is cheap and looking for such rows would
    wait for the device, log-softmax then ``exp``, both in place.
    """
    if logits.device.type != "cpu":
        torch.ops.aten._log_softmax.out(logits, 1, False, out=logits)
        picked = logits.gather(1, targets[:, None]).squeeze(1)
        logits.exp_()
        return picked
    torch.ops.aten._softmax.out(logits, 1, False, out=logits)
    probability = logits.gather(1, targets[:, None]).squeeze(1)
    picked = probability.log()
    tiny = (probability < _TINY_PROBABILITY).nonzero().squeeze(1)
    if tiny.numel():
        picked[tiny] = torch.log_softmax(row_logits(tiny), dim=1).gather(1, targets[tiny, None]).squeeze(1)
    return picked


_KEPT_BUFFERS: dict[torch.device, Tensor] = {}


def _buffer(device: torch.device, rows: int, columns: int) -> Tensor:
    """A float32 (rows, columns) buffer for a slice's logits, turned into their probabilities in place.

    On the CPU it is kept from one call to the next (grown when a call needs more, at most
    ``SLICE_ELEMENTS`` padded entries): the C allocator maps blocks over 32 MiB fresh from the
    operating system at every allocation, and writing fresh pages costs many times what writing
    pages already mapped does (benchmarks/allocator.py). GPU allocators keep their blocks
    themselves.
    """
    if device.type != "cpu":
        return torch.empty(rows, columns, device=device)
    size = rows * columns
    kept = _KEPT_BUFFERS.get(device)
    if kept is None or kept.numel() < size:
        with torch.inference_mode(False):  # written by training steps too, so never an inference tensor
            kept = _KEPT_BUFFERS[device] = torch.empty(size, device=device)
    return kept[:size].view(rows, columns)


def kept_buffers() -> list[Tensor]:
    """The buffers kept between calls (memory this module holds outside any call)."""
    return list(_KEPT_BUFFERS.values())
