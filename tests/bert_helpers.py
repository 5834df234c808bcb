"""A tiny random BERT in transformers format, a padded sentence-pair batch for it, and a made-up MRPC folder."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_vocab import TINY_VOCAB
from transformers import BertConfig, BertModel

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
TINY_BERT = dict(
    vocab_size=101,
    hidden_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=80,
    max_position_embeddings=40,
    type_vocab_size=2,
)


def save_tiny_bert(folder: Path, model_class: type = BertModel, **overrides):
    """A random ``model_class`` (BertModel, BertForMaskedLM ...) saved with save_pretrained."""
    torch.manual_seed(0)
    model = model_class(BertConfig(**{**TINY_BERT, **overrides})).eval()
    # Non-trivial norms and biases, so a dropped or swapped parameter cannot go unnoticed.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(str(folder))
    return model


def pair_batch(vocab: int = 101) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, vocab, (4, 17), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 11:] = 0  # padded rows, as dynamic padding makes them
    attention_mask[3, 6:] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 8:] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def write_mrpc(folder: Path) -> Path:
    """A made-up MRPC: paraphrase pairs share their words, the others do not."""
    words = [w for w in TINY_VOCAB if not w.startswith("[")]
    rows = []
    for i in range(24):
        first = " ".join(words[(i + k) % len(words)] for k in range(5))
        second = first if i % 2 else " ".join(words[(i + 11 + k) % len(words)] for k in range(5))
        rows.append(f"{i % 2}\t{i}\t{i + 100}\t{first}\t{second}")
    task = folder / "MRPC"
    task.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (task / name).write_text("\ufeff" + "\n".join([MRPC_HEADER, *rows]) + "\n", encoding="utf-8")
    return folder
