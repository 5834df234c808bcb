"""Predict a fresh model's initial loss from its configuration: arithmetic only.

With near-identity residual branches and a final norm, a fresh model maps input token i to
x = norm(w_i + p_t + s) and scores token j with z_j = x . w_j (tied) or x . v_j (untied).
Two numbers describe the logits (see docs/science.md §1):

- ``self_logit`` a: the expected score of the input token itself, |w_i|^2 / rms for a tied head
  (d sigma when nothing else is added); ~0 when the head decorrelates (untied, orth, shuffle).
- ``logit_var`` v: the variance of every other score (|x|^2 sigma^2 = d sigma^2).

A target that is not the input token then costs log(e^a + (n-1) e^{v/2}) (lognormal mean),
and a target that is the input token (a repeat; MLM's 10% kept positions) costs that minus a.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The model's own list of head names and its scale arithmetic: the prediction speaks of exactly the
# heads and scale settings a config accepts. ``tiedemb.nn.config`` imports nothing heavy.
from tiedemb.nn.config import HEAD_NAMES, SCALE_KEYWORDS, readout_width, resolve_scale

__all__ = [
    "HEAD_NAMES",
    "MLM_KEPT_FRACTION",
    "SCALE_KEYWORDS",
    "SELF_ALIGNED_HEADS",
    "Prediction",
    "predict_for_config",
    "predict_initial_loss",
    "readout_width",
    "resolve_scale",
    "token_std",
]

#: Heads whose output matrix is the token embedding seen without a decorrelating map.
SELF_ALIGNED_HEADS = ("tied", "tied_scaled_init")

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


def token_std(
    head: str, vocab_size: int, embedding_dim: int, init_std: float, embedding_init_std: float | None = None
) -> float:
    """The std of the token embedding rows the given head variant draws.

    ``embedding_init_std`` (T5 draws its embedding with std 1.0) replaces ``init_std`` for the
    token table only; the scaled-init head's own rule wins over both.
    """
    if head == "tied_scaled_init":
        return math.log(vocab_size) / embedding_dim
    return embedding_init_std if embedding_init_std is not None else init_std


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
    """Expected initial loss of a near-identity network; see the module docstring.

    ``repeat_rate``: fraction of CLM targets equal to their input token (natural text: <1%).
    ``output_scale``: a multiplier on the logits (T5's d^-1/2, muP's output multiplier).
    ``embedding_scale``: a multiplier on the token vectors before position and segment vectors
    are added (Gemma's sqrt(d)). Behind the embedding's norm it only changes the token's share of
    the normalised input, so without additive position or segment vectors it changes nothing.
    ``embedding_init_std``: the token table's own std (T5: 1.0); ``init_std`` when unset.
    ``embedding_projection``: ``"always"`` puts the Xavier projection (and the tied heads' down-map)
    in place at d_e = hidden too. Whether the embedding's own norm is there changes nothing here:
    the final norm (pre-norm) or the block norms (post-norm) normalise the near-identity stream.
    """
    if head not in HEAD_NAMES:
        raise ValueError(f"unknown head {head!r}; valid: {', '.join(HEAD_NAMES)}")
    n, hidden = vocab_size, hidden_size
    d_e = embedding_dim or hidden
    sigma_t = token_std(head, n, d_e, init_std, embedding_init_std)
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
    if head in SELF_ALIGNED_HEADS:
        self_logit = aligned_gain * embedding_scale * sigma_t**2 / rms
        logit_var = var_width * sigma_t**2
    else:
        self_logit = 0.0
        # |x| = sqrt(hidden) meets untied rows directly; the orthogonal map keeps a d_e/hidden share
        # of |x|^2; the shuffle permutes what the tied down-map produces.
        width = {"untied": hidden, "tied_orth": d_e}.get(head, var_width)
        sigma_out = init_std if head == "untied" else sigma_t  # an untied matrix never takes the token std
        logit_var = width * sigma_out**2
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


def predict_for_config(config: object, repeat_rate: float = 0.0) -> Prediction:
    """``predict_initial_loss`` from any object carrying the model's field names.

    Scale keywords (``rsqrt_d`` ...) are resolved against the widths the model applies them to.
    """
    d_e = config.embedding_dim or config.hidden_size
    width = readout_width(config.head, config.hidden_size, config.embedding_dim)
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
        output_scale=resolve_scale(getattr(config, "output_scale", 1.0), width, "model.output_scale"),
        embedding_scale=resolve_scale(getattr(config, "embedding_scale", 1.0), d_e, "model.embedding_scale"),
        embedding_init_std=getattr(config, "embedding_init_std", None),
        embedding_projection=getattr(config, "embedding_projection", "auto") or "auto",
    )
