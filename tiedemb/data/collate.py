"""Batch assembly for the two pretraining objectives, in the Hugging Face batch convention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

IGNORE_INDEX = -100


def stack_input_ids(examples: Sequence[dict]) -> Tensor:
    return torch.stack([torch.as_tensor(example["input_ids"], dtype=torch.long) for example in examples])


@dataclass
class CausalCollator:
    """Labels are the inputs; the model shifts them (as transformers' causal LMs do)."""

    pad_token_id: int

    def __call__(self, examples: Sequence[dict]) -> dict[str, Tensor]:
        input_ids = stack_input_ids(examples)
        attention_mask = (input_ids != self.pad_token_id).long()
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


@dataclass
class MaskingCollator:
    """BERT masking: pick ``probability`` of the non-special tokens; of those 80% become
    [MASK], 10% a random non-special token, 10% stay. Loss only at picked positions."""

    vocab_size: int
    mask_token_id: int
    pad_token_id: int
    special_token_ids: Sequence[int]
    probability: float = 0.15
    generator: torch.Generator | None = None
    _special: Tensor = field(init=False, repr=False)
    _ordinary: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._special = torch.tensor(sorted(set(self.special_token_ids) | {self.pad_token_id}), dtype=torch.long)
        ordinary = torch.ones(self.vocab_size, dtype=torch.bool)
        ordinary[self._special] = False
        self._ordinary = ordinary.nonzero().squeeze(1)

    def __call__(self, examples: Sequence[dict]) -> dict[str, Tensor]:
        input_ids = stack_input_ids(examples)
        attention_mask = (input_ids != self.pad_token_id).long()
        masked_ids, labels = self.mask(input_ids)
        return {"input_ids": masked_ids, "attention_mask": attention_mask, "labels": labels}

    def mask(self, input_ids: Tensor) -> tuple[Tensor, Tensor]:
        rand = lambda: torch.rand(input_ids.shape, generator=self.generator)  # noqa: E731
        maskable = ~torch.isin(input_ids, self._special)
        picked = (rand() < self.probability) & maskable
        labels = input_ids.masked_fill(~picked, IGNORE_INDEX)
        draw = rand()
        to_mask = picked & (draw < 0.8)
        to_random = picked & (draw >= 0.8) & (draw < 0.9)
        output = input_ids.masked_fill(to_mask, self.mask_token_id)
        random_tokens = self._ordinary[
            torch.randint(len(self._ordinary), input_ids.shape, generator=self.generator)
        ]
        output = torch.where(to_random, random_tokens, output)
        return output, labels


def make_collator(
    objective: str,
    *,
    vocab_size: int,
    pad_token_id: int,
    mask_token_id: int | None,
    special_token_ids: Sequence[int],
    mlm_probability: float = 0.15,
) -> CausalCollator | MaskingCollator:
    if objective == "clm":
        return CausalCollator(pad_token_id=pad_token_id)
    if mask_token_id is None:
        raise ValueError("masked language modelling needs a tokenizer with a mask token")
    return MaskingCollator(
        vocab_size=vocab_size,
        mask_token_id=mask_token_id,
        pad_token_id=pad_token_id,
        special_token_ids=special_token_ids,
        probability=mlm_probability,
    )
