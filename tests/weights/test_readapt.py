"""Re-adapting a narrowed embedding: the output error falls, only the narrow tables and projection move."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.model import Embedding
from tiedemb.weights.narrow import factorise_tables
from tiedemb.weights.readapt import readapt_embedding

VOCAB, WIDTH, NARROW = 60, 32, 6


def full_and_narrow() -> tuple[Embedding, Embedding]:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=16
    )
    full = Embedding(config)
    narrow = Embedding(replace(config, embedding_dim=NARROW))
    tables = [full.token.weight, full.position.weight, full.segment.weight]
    fitted = factorise_tables(tables, None, NARROW)
    with torch.no_grad():
        for module, table in zip((narrow.token, narrow.position, narrow.segment), fitted.tables):
            module.weight.copy_(table)
        narrow.projection.weight.copy_(fitted.projection)
        narrow.norm.load_state_dict(full.norm.state_dict())
    return full, narrow


def text_batches(count: int = 20) -> list[dict[str, torch.Tensor]]:
    """Skewed text: ten tokens make up nearly all of it, as in real text, with padding at the ends."""
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(count):
        input_ids = torch.randint(0, 10, (4, 12), generator=generator)
        mask = torch.ones_like(input_ids)
        mask[:, 9:] = 0
        token_type_ids = (torch.arange(12) >= 6).long().expand(4, 12)
        # labels are not read: garbage here would fail a fit that used them
        batches.append(
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_type_ids, "labels": None}
        )
    return batches


def output_error(narrow: Embedding, full: Embedding, batches: list[dict]) -> float:
    full.eval(), narrow.eval()
    with torch.no_grad():
        errors = [
            (narrow(b["input_ids"], b["token_type_ids"]) - full(b["input_ids"], b["token_type_ids"]))[
                b["attention_mask"].bool()
            ]
            .pow(2)
            .mean()
            for b in batches
        ]
    return float(torch.stack(errors).mean())


def test_the_fit_lowers_the_output_error_on_the_text_and_moves_only_tables_and_projection():
    full, narrow = full_and_narrow()
    batches = text_batches()
    full_before = {k: v.clone() for k, v in full.state_dict().items()}
    norm_before = {k: v.clone() for k, v in narrow.norm.state_dict().items()}
    table_before = narrow.token.weight.detach().clone()
    independent_before = output_error(narrow, full, batches[:8])
    result = readapt_embedding(narrow, full, batches, steps=200, learning_rate=1e-2)
    # the errors it reports are the ones an independent recount gives, on its first eight batches
    assert result.error_before == pytest.approx(independent_before, rel=1e-5)
    assert result.error_after == pytest.approx(output_error(narrow, full, batches[:8]), rel=1e-5)
    assert result.error_after < 0.7 * result.error_before  # measured: 0.465 -> 0.285
    for key, value in full.state_dict().items():
        assert torch.equal(value, full_before[key]), key
    for key, value in narrow.norm.state_dict().items():
        assert torch.equal(value, norm_before[key]), key
    assert not torch.equal(narrow.token.weight, table_before)
    # tokens the text never uses are not fitted: their rows keep the narrowing's values
    torch.testing.assert_close(narrow.token.weight[10:], table_before[10:])
    assert all(p.grad is None for p in narrow.parameters())


def test_no_batches_or_no_steps_are_refused():
    full, narrow = full_and_narrow()
    with pytest.raises(ValueError, match="no batches"):
        readapt_embedding(narrow, full, [], steps=5)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        readapt_embedding(narrow, full, text_batches(2), steps=0)
