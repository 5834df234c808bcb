"""The batch the initial loss is measured on, and which positions are scored.

Token ids come from a local text and tokenizer when given, otherwise from a Zipf distribution
(exponent 1) over the vocabulary in a random order, the padding id left out (a zero row would
score nothing). Which positions are scored follows the model's objective:

- next token (decoders): every position predicts the following id;
- masked token (BERT, ALBERT, RoBERTa): BERT's recipe, 15% of positions, of those 80% shown as the
  mask id, 10% as a random id, 10% unchanged; only those positions are scored. A masked LM is
  trained and used this way, and its head meets the tied table at exactly these positions;
- T5: the encoder reads one draw, the decoder reads a second draw shifted right behind the start
  id and predicts it, each position the next id.

``current`` is, at every scored position, the id the head's own position reads: the id a tied
2-gram model predicts again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tiedemb.errors import UserError
from tiedemb.nn.layers import IGNORE_INDEX

MASK_SHARE, MASK_AS_MASK, MASK_AS_RANDOM = 0.15, 0.8, 0.1


@dataclass
class Batch:
    inputs: dict[str, Tensor]  # the model's keyword arguments
    targets: Tensor  # (batch, positions) aligned with the logits; IGNORE_INDEX where not scored
    current: Tensor  # (batch, positions) the id read at each position
    described: str  # where the ids came from, in words

    @property
    def scored(self) -> Tensor:
        return self.targets != IGNORE_INDEX

    @property
    def repeat_rate(self) -> float:
        """The share of scored positions whose target is the id read there."""
        return float((self.targets == self.current)[self.scored].float().mean())


def zipf_ids(vocab_size: int, shape: tuple[int, int], generator: torch.Generator, exclude: int | None) -> Tensor:
    order = torch.randperm(vocab_size, generator=generator)
    if exclude is not None:
        order = order[order != exclude]
    weights = 1.0 / torch.arange(1, len(order) + 1, dtype=torch.float64)
    picks = torch.multinomial(weights, shape[0] * shape[1], replacement=True, generator=generator)
    return order[picks].reshape(shape)


def text_ids(text: Path, tokenizer: str, vocab_size: int, shape: tuple[int, int]) -> Tensor:
    from transformers import AutoTokenizer

    try:
        words = text.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--text {text}: cannot read it as UTF-8 text ({error.__class__.__name__})") from None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    except Exception as error:
        raise UserError(f"--tokenizer {tokenizer}: no local tokenizer there ({error.__class__.__name__})") from None
    ids = torch.tensor(tok(words, add_special_tokens=False)["input_ids"], dtype=torch.long)
    need = shape[0] * shape[1]
    if len(ids) < need:
        raise UserError(f"--text {text} holds {len(ids)} tokens; the batch needs {need} (--batch x --seq-len)")
    if int(ids.max()) >= vocab_size:
        raise UserError(
            f"--tokenizer {tokenizer} has ids up to {int(ids.max())}, beyond the model's vocabulary of {vocab_size}"
        )
    return ids[:need].reshape(shape)


def make_batch(
    config: Any,
    objective: str,
    shape: tuple[int, int],
    seed: int,
    text: Path | None = None,
    tokenizer: str | None = None,
) -> Batch:
    n = int(config.vocab_size)
    generator = torch.Generator().manual_seed(seed)
    pad = config.pad_token_id if isinstance(config.pad_token_id, int) and 0 <= config.pad_token_id < n else None
    if text is not None:
        ids = text_ids(text, tokenizer, n, shape)
        described = f"{shape[0]} x {shape[1]} ids of {text.name} tokenised by {tokenizer}"
        mask_id = _tokenizer_mask(tokenizer)
    else:
        ids = zipf_ids(n, shape, generator, pad)
        described = f"{shape[0]} x {shape[1]} ids drawn from a Zipf distribution (exponent 1) over the vocabulary"
        mask_id = None
    if objective == "mlm":
        return _masked(ids, n, generator, pad, mask_id, described)
    if objective == "seq2seq":
        start = getattr(config, "decoder_start_token_id", None)
        start = start if start is not None else pad or 0  # T5 starts the decoder with its padding id
        encoder = zipf_ids(n, shape, generator, pad) if text is None else ids.roll(1, dims=0)
        decoder = torch.cat((torch.full((shape[0], 1), start), ids[:, :-1]), dim=1)
        inputs = {"input_ids": encoder, "decoder_input_ids": decoder}
        return Batch(inputs, ids, decoder, described + "; the decoder predicts them after its start id")
    targets = torch.cat((ids[:, 1:], torch.full((shape[0], 1), IGNORE_INDEX)), dim=1)
    return Batch({"input_ids": ids}, targets, ids, described + "; each position scored on the next id")


def _tokenizer_mask(tokenizer: str) -> int | None:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer, local_files_only=True).mask_token_id


def _masked(
    ids: Tensor, n: int, generator: torch.Generator, pad: int | None, mask_id: int | None, described: str
) -> Batch:
    rows, width = ids.shape
    # Without a tokenizer the mask id is the last id of the vocabulary: at initialisation every
    # row of the table is alike, so which id stands for [MASK] does not matter.
    mask_id = n - 1 if mask_id is None else mask_id
    count = max(1, round(MASK_SHARE * width))
    chosen = torch.rand(rows, width, generator=generator).argsort(dim=1)[:, :count]
    selected = torch.zeros_like(ids, dtype=torch.bool).scatter_(1, chosen, True)
    kind = torch.rand(rows, width, generator=generator)
    shown = ids.clone()
    shown[selected & (kind < MASK_AS_MASK)] = mask_id
    randomised = selected & (kind >= MASK_AS_MASK) & (kind < MASK_AS_MASK + MASK_AS_RANDOM)
    if randomised.any():
        shown[randomised] = zipf_ids(n, (1, int(randomised.sum())), generator, pad).flatten()
    targets = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    text = (
        f"{described}; {count} of {width} positions a row masked as BERT does "
        f"(80% mask id {mask_id}, 10% random, 10% kept) and scored"
    )
    return Batch({"input_ids": shown}, targets, shown, text)
