"""Batch assembly for the two pretraining objectives, in the Hugging Face batch convention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tiedemb.data.sampling import SAMPLE_KEY, example_seed
from tiedemb.nn.layers import IGNORE_INDEX


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
    seed: int = 0  # of the per-example masks of keyed examples
    _special: Tensor = field(init=False, repr=False)
    _ordinary: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._special = torch.tensor(sorted(set(self.special_token_ids) | {self.pad_token_id}), dtype=torch.long)
        ordinary = torch.ones(self.vocab_size, dtype=torch.bool)
        ordinary[self._special] = False
        self._ordinary = ordinary.nonzero().squeeze(1)

    def __call__(self, examples: Sequence[dict]) -> dict[str, Tensor]:
        input_ids = stack_input_ids(examples)
        keys = [example.get(SAMPLE_KEY) for example in examples]
        # Keyed examples (see tiedemb.data.sampling): each row's masks follow from (seed, epoch,
        # index), so a resumed run masks exactly as an uninterrupted one.
        seeds = [example_seed(self.seed, int(e), int(i)) for e, i in keys] if None not in keys else None
        masked_ids, labels = self.mask(input_ids, row_seeds=seeds)
        return {"input_ids": masked_ids, "attention_mask": (input_ids != self.pad_token_id).long(), "labels": labels}

    def mask(self, input_ids: Tensor, row_seeds: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
        """Mask ``input_ids``; the draws come from ``generator``, or per row from ``row_seeds``."""
        if row_seeds is None:
            pick_draw, kind_draw, random_draw = self._draw(self.generator, tuple(input_ids.shape))
        else:
            rows = [self._draw(torch.Generator().manual_seed(seed), tuple(input_ids.shape[1:])) for seed in row_seeds]
            pick_draw, kind_draw, random_draw = (torch.stack(parts) for parts in zip(*rows))
        picked = (pick_draw < self.probability) & ~torch.isin(input_ids, self._special)
        labels = input_ids.masked_fill(~picked, IGNORE_INDEX)
        output = input_ids.masked_fill(picked & (kind_draw < 0.8), self.mask_token_id)
        output = torch.where(picked & (kind_draw >= 0.8) & (kind_draw < 0.9), self._ordinary[random_draw], output)
        return output, labels

    def _draw(self, generator: torch.Generator | None, size: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
        return (
            torch.rand(size, generator=generator),
            torch.rand(size, generator=generator),
            torch.randint(len(self._ordinary), size, generator=generator),
        )
