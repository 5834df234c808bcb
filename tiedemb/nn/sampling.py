"""Text continued by a next-token ``Transformer``: one token at a time, sampled or greedy.

No key/value cache: each new token runs the model over the whole context again (the last
``max_position_embeddings`` tokens), which costs nothing worth saving at the sizes tiedemb trains
and keeps the model's own forward the only code path. ``temperature`` 0 is greedy decoding;
``top_k`` and ``top_p`` (nucleus) narrow the draw before it is made.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tiedemb.nn.model import Transformer


def next_token_scores(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The last position's logits (B, vocab) divided by the temperature, with the tokens ``top_k``
    and ``top_p`` rule out set to -inf."""
    scores = logits.float() / temperature
    if top_k is not None and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1, descending=True)
        mass = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
        # keep each token whose preceding mass is below top_p: the most likely one always stays
        drop = (mass - torch.softmax(ordered, dim=-1)) >= top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return scores


@torch.no_grad()
def continue_tokens(
    model: Transformer,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_id: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``input_ids`` (1, T) followed by up to ``max_new_tokens`` new ids, stopping after ``stop_id``."""
    if not model.config.causal:
        raise ValueError("continue_tokens needs a next-token (objective clm) model")
    window = model.config.max_position_embeddings
    ids = input_ids
    for _ in range(max_new_tokens):
        logits = model(ids[:, -window:]).logits[:, -1, :]
        if temperature == 0:
            chosen = logits.argmax(dim=-1, keepdim=True)
        else:
            probabilities = torch.softmax(next_token_scores(logits, temperature, top_k, top_p), dim=-1)
            chosen = torch.multinomial(probabilities, 1, generator=generator)
        ids = torch.cat([ids, chosen.to(ids.dtype)], dim=1)
        if stop_id is not None and int(chosen) == stop_id:
            break
    return ids
