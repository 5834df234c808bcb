"""The unigram and bigram baselines on hand-made blocks whose answer is counted by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tiedemb.data.baselines import ngram_baselines

# Training blocks: tokens 0 and 1 four times each, token 2 never; pairs (0,1) four times, (1,0) twice.
TRAIN = np.array([[0, 1, 0, 1], [0, 1, 0, 1]])
VOCAB = 3


def test_next_token_baselines_match_a_hand_count():
    # targets of the block [0, 1, 2] are 1 (after 0) and 2 (after 1)
    found = ngram_baselines(TRAIN, np.array([[0, 1, 2]]), vocab_size=VOCAB, objective="clm")
    # unigram: (count + 1) / (8 + 3)
    assert found["unigram"] == pytest.approx(-(math.log(5 / 11) + math.log(1 / 11)) / 2)
    # bigram: p(1|0) = (4 + 1) / (4 + 3); p(2|1) = (0 + 1) / (2 + 3)
    assert found["bigram"] == pytest.approx(-(math.log(5 / 7) + math.log(1 / 5)) / 2)


def test_pairs_never_cross_a_block_boundary():
    # Two blocks [0, 1] and [1, 0]: the pair (1, 1) across the boundary must not be counted.
    found = ngram_baselines(np.array([[0, 1], [1, 0]]), np.array([[1, 1]]), vocab_size=2, objective="clm")
    # context 1 occurs once (followed by 0): p(1|1) = (0 + 1) / (1 + 2)
    assert found["bigram"] == pytest.approx(-math.log(1 / 3))


class FixedMasks:
    """A stand-in for the validation collator: position 2 of every row is the target, shown as [MASK];
    position 1 too in odd rows, so that position 2's left neighbour is then a [MASK]."""

    mask_token_id = 9

    def __call__(self, examples):
        ids = torch.tensor(np.stack([example["input_ids"] for example in examples]))
        labels = torch.full_like(ids, -100)
        labels[:, 2] = ids[:, 2]
        seen = ids.clone()
        seen[:, 2] = self.mask_token_id
        for row, example in enumerate(examples):
            if example["sample_key"][1] % 2:
                labels[row, 1] = ids[row, 1]
                seen[row, 1] = self.mask_token_id
        return {"input_ids": seen, "labels": labels}


def test_masked_token_baselines_score_the_masked_positions_and_fall_back_after_a_mask():
    val = np.array([[0, 0, 1, 2], [1, 0, 1, 2]])
    found = ngram_baselines(TRAIN, val, vocab_size=10, objective="mlm", collator=FixedMasks())
    # train counts with n = 10: unigram p(w) = (c + 1) / (8 + 10); contexts 0: 4, 1: 2
    uni = lambda w: math.log(([4, 4] + [0] * 8)[w] + 1) - math.log(18)  # noqa: E731
    # row 0: target 1 after a visible 0 -> bigram p(1|0) = (4 + 1) / (4 + 10)
    # row 1: target 0 at position 1 after 1 -> p(0|1) = (2 + 1) / (2 + 10); target 1 at position 2 after a
    # [MASK] -> the unigram's p(1)
    expected_unigram = -(uni(1) + uni(0) + uni(1)) / 3
    expected_bigram = -(math.log(5 / 14) + math.log(3 / 12) + uni(1)) / 3
    assert found["unigram"] == pytest.approx(expected_unigram)
    assert found["bigram"] == pytest.approx(expected_bigram)
