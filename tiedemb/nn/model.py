"""The whole model: Embedding -> Encoder -> OutputHead, with the loss.

Follows the Hugging Face batch convention (input_ids, attention_mask, token_type_ids, labels
with -100 where no loss) so it drops into code written for transformers models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.embedding import Embedding
from tiedemb.nn.encoder import Encoder
from tiedemb.nn.heads import build_head
from tiedemb.nn.init import init_transformer

IGNORE_INDEX = -100


@dataclass
class LMOutput:
    loss: Tensor | None
    logits: Tensor  # MLM: (num_masked, vocab); CLM: (B, T, vocab)
    num_targets: int = 0

    def __getitem__(self, key: str) -> Tensor | None:
        return getattr(self, key)


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = Embedding(config)
        self.encoder = Encoder(config)
        self.head = build_head(config)
        self.tie_weights()
        init_transformer(self, config)

    def tie_weights(self) -> None:
        """One Parameter, two uses. Call again after anything that re-creates parameters
        (meta-device materialisation, sharding wrappers)."""
        if self.head.tied:
            self.head.decoder.weight = self.embedding.token.weight

    @property
    def is_tied(self) -> bool:
        return self.head.tied and self.head.decoder.weight is self.embedding.token.weight

    def encode(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        return self.encoder(self.embedding(input_ids, token_type_ids), attention_mask)  # (B, T, hidden)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> LMOutput:
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        if labels is None:
            return LMOutput(loss=None, logits=self.head(hidden))
        if self.config.causal:
            # Position t predicts token t+1; every position's logits are needed anyway.
            logits = self.head(hidden)
            targets = labels[:, 1:].reshape(-1)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets, ignore_index=IGNORE_INDEX)
            return LMOutput(loss=loss, logits=logits, num_targets=int((targets != IGNORE_INDEX).sum()))
        # MLM: project only the masked positions; batch x seq x vocab logits are never built.
        selected = labels != IGNORE_INDEX
        targets = labels[selected]
        logits = self.head(hidden[selected])  # (num_masked, vocab)
        if targets.numel() == 0:
            loss = logits.sum() * 0.0  # keeps the graph, contributes nothing
        else:
            loss = F.cross_entropy(logits.float(), targets)
        return LMOutput(loss=loss, logits=logits, num_targets=targets.numel())
