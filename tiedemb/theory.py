"""Predict a fresh model's initial loss from its configuration (docs/science.md §1).

A fresh near-identity model maps input token i to x = norm(w_i + p_t + s) and scores token j with
z_j = x . w_j (tied) or x . v_j (untied). ``self_logit`` a is the expected score of the input token
itself (d sigma for a plain tied head; ~0 where the head decorrelates), ``logit_var`` v the variance
of every other score. A target other than the input token costs log(e^a + (n-1) e^{v/2}) (lognormal
mean); a repeat of it (MLM's 10% kept positions) costs that minus a. Each head class turns the common
``FreshReadout`` into its own (a, v) (``OutputHead.initial_logits``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiedemb.nn.heads import FreshReadout, head_class

if TYPE_CHECKING:
    from tiedemb.nn.config import TransformerConfig

#: BERT's masking: of the selected 15%, 80% -> [MASK], 10% -> random token, 10% kept.
MLM_KEPT_FRACTION = 0.1


@dataclass(frozen=True)
class Prediction:
    loss: float  # expected initial cross-entropy, nats
    log_n: float  # the uniform model's loss
    self_logit: float
    logit_var: float
    loss_other: float  # a target that differs from the input token
    loss_same: float  # a target equal to the input token


def _log_add_exp(a: float, b: float) -> float:
    high = max(a, b)
    return high + math.log(math.exp(a - high) + math.exp(b - high))


def predict_initial_loss(
    *,
    vocab_size: int,
    hidden_size: int,
    embedding_dim: int | None = None,
    init_std: float = 0.02,
    head: str = "tied",
    objective: str = "clm",
    position: str = "rope",
    type_vocab_size: int = 0,
    repeat_rate: float = 0.0,
    output_scale: float = 1.0,
    embedding_scale: float = 1.0,
    embedding_init_std: float | None = None,
    embedding_projection: str = "auto",
) -> Prediction:
    """Expected initial loss of a near-identity network.

    ``repeat_rate``: fraction of CLM targets equal to their input token (natural text: <1%).
    ``output_scale``: a multiplier on the logits (T5's d^-1/2, muP's). ``embedding_scale``: one on
    the token vectors before positions and segments are added (Gemma's sqrt(d)); behind the norm it
    only changes the token's share of the input. ``embedding_init_std``: the token table's own std
    (``init_std`` when unset). ``embedding_projection="always"``: the Xavier projection at d_e = hidden too.
    """
    head_type = head_class(head)
    n, hidden = vocab_size, hidden_size
    d_e = embedding_dim or hidden
    sigma_t = head_type.token_std(
        vocab_size=n, embedding_dim=d_e, init_std=init_std, embedding_init_std=embedding_init_std
    )
    sigma_p = init_std if position == "learned" else 0.0
    sigma_s = init_std if type_vocab_size > 0 else 0.0
    # The norm divides by the rms of the sum, in which the token part carries the input scale.
    rms = math.sqrt((embedding_scale * sigma_t) ** 2 + sigma_p**2 + sigma_s**2)

    if d_e == hidden and embedding_projection != "always":
        aligned_gain, var_width = float(hidden), float(hidden)
    else:
        # Xavier-uniform projection P (hidden x d_e, variance q) and, for the plain tied heads, the
        # down-map P^T: P^T P ~= hidden*q*I, so the self score keeps hidden*sqrt(q*d_e) of its size.
        q = 2.0 / (hidden + d_e)
        aligned_gain, var_width = hidden * math.sqrt(q * d_e), 2.0 * hidden
    readout = FreshReadout(
        hidden_size=hidden,
        embedding_dim=d_e,
        token_std=sigma_t,
        init_std=init_std,
        token_share=embedding_scale * sigma_t / rms,
        aligned_gain=aligned_gain,
        mixed_width=var_width,
    )
    self_logit, logit_var = head_type.initial_logits(readout)
    self_logit *= output_scale
    logit_var *= output_scale**2

    loss_other = _log_add_exp(self_logit, math.log(n - 1) + logit_var / 2.0)
    loss_same = loss_other - self_logit
    same_fraction = MLM_KEPT_FRACTION if objective == "mlm" else repeat_rate
    loss = (1.0 - same_fraction) * loss_other + same_fraction * loss_same
    return Prediction(
        loss=loss,
        log_n=math.log(n),
        self_logit=self_logit,
        logit_var=logit_var,
        loss_other=loss_other,
        loss_same=loss_same,
    )


def predict_for_config(config: TransformerConfig, repeat_rate: float = 0.0) -> Prediction:
    """``predict_initial_loss`` of a ``TransformerConfig``, its scale keywords resolved."""
    return predict_initial_loss(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        embedding_dim=config.embedding_dim,
        init_std=config.init_std,
        head=config.head,
        objective=config.objective,
        position=config.position,
        type_vocab_size=config.type_vocab_size,
        repeat_rate=repeat_rate,
        output_scale=config.readout_scale,
        embedding_scale=config.token_scale,
        embedding_init_std=config.embedding_init_std,
        embedding_projection=config.embedding_projection,
    )
