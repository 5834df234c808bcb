"""Sequence(-pair) classification: the pretraining embedding and encoder (so a pretraining checkpoint's
``embedding.*`` and ``encoder.*`` load by name), then BERT's head on [CLS]: an optional pooler (dense +
tanh), dropout and a linear classifier.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.fast.dropout import Dropout
from tiedemb.nn.layers import init_linear
from tiedemb.nn.model import Embedding, Encoder, init_embedding, init_encoder


class SequenceClassifier(nn.Module):
    def __init__(
        self, config: TransformerConfig, num_labels: int, pooler: bool = True, classifier_dropout: float | None = None
    ) -> None:
        super().__init__()
        if config.causal:
            raise ValueError("a sequence classifier reads the whole pair: build it with a non-causal objective")
        self.config = config
        self.embedding = Embedding(config)
        self.encoder = Encoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if pooler else None
        self.dropout = Dropout(config.dropout if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The embedding and encoder drawn as pretraining draws them; BERT's pooler and classifier too."""
        init_embedding(self.embedding, self.config, self.config.init_std)
        init_encoder(self.encoder, self.config)
        for linear in (self.pooler, self.classifier):
            if linear is not None:
                init_linear(linear, self.config.init_std)

    def encode(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Last hidden state (B, T, hidden): what ``transformers.BertModel`` calls last_hidden_state."""
        return self.encoder(self.embedding(input_ids, token_type_ids), attention_mask)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        # Only [CLS] is read, so the last block's output projection, feed-forward and norms skip the
        # other positions. Same values as encode()[:, 0].
        first = self.encoder(self.embedding(input_ids, token_type_ids), attention_mask, positions=0)  # (B, hidden)
        if self.pooler is not None:
            first = torch.tanh(self.pooler(first))
        return self.classifier(self.dropout(first))  # (B, num_labels)
