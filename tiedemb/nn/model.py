"""The whole model: Embedding -> Encoder -> OutputHead, with the loss.

Follows the Hugging Face batch convention (input_ids, attention_mask, token_type_ids, labels
with -100 where no loss) so it drops into code written for transformers models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.embedding import Embedding
from tiedemb.nn.encoder import Encoder
from tiedemb.nn.heads import build_head
from tiedemb.nn.init import init_transformer
from tiedemb.nn.loss import IGNORE_INDEX, linear_cross_entropy


@dataclass
class LMOutput:
    loss: Tensor | None
    logits: Tensor | None  # MLM: (num_masked, vocab); CLM: (B, T, vocab); None if not asked for
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
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """(B, T, hidden); with ``rows`` (flat B * T indices) only those positions, (len(rows), hidden)."""
        return self.encoder(self.embedding(input_ids, token_type_ids), attention_mask, rows)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        *,
        return_logits: bool = True,
    ) -> LMOutput:
        """``return_logits=False`` (with labels): the loss alone, computed without materialising
        the logits where that is exact (``tiedemb.nn.loss``); ``logits`` is then None."""
        if labels is None:
            return LMOutput(loss=None, logits=self.head(self.encode(input_ids, attention_mask, token_type_ids)))
        if self.config.causal:
            # Position t predicts token t+1, so every position is projected. The labels shift left
            # (the last position gets none) rather than the logits right: slicing (B, T, vocab)
            # logits would copy them, and their gradient, once more.
            targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX).reshape(-1)
            hidden = self.encode(input_ids, attention_mask, token_type_ids)
            rows = hidden.reshape(-1, hidden.shape[-1])
            num_targets = int((targets != IGNORE_INDEX).sum())  # after the encoder is queued: a GPU sync
        else:
            # MLM: only the masked positions are projected, and their states are the only ones the
            # last block finishes; batch x seq x vocab logits are never built.
            positions = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
            targets = labels.reshape(-1)[positions]
            num_targets = targets.numel()
            rows = self.encode(input_ids, attention_mask, token_type_ids, rows=positions)  # (num_masked, hidden)
        if not return_logits and num_targets > 0:
            loss = linear_cross_entropy(self.head.features(rows), self.head.decoder.weight, self.head.bias, targets)
            return LMOutput(loss=loss, logits=None, num_targets=num_targets)
        logits = self.head(rows)  # (rows, vocab)
        if num_targets == 0:
            loss = logits.sum() * 0.0  # keeps the graph, contributes nothing
        else:
            loss = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)
        if self.config.causal:
            logits = logits.view(*labels.shape, -1)  # (B, T, vocab)
        return LMOutput(loss=loss, logits=logits, num_targets=num_targets)
