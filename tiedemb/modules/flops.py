"""Model FLOPs of a step, what MFU divides by a device's peak: PaLM's count (Chowdhery et al. 2022, app. B).

A weight matrix of N entries costs 6N FLOPs per row it multiplies in a training step (2N forward,
4N backward), attention 12 * L * T * d per token; embedding lookups and vectors (biases, norm gains)
count nothing. Unlike PaLM, the output head (and the last block's attention output and feed-forward,
which the encoder runs only there) counts only at the positions projected: every position for CLM,
the masked ones for MLM, a classifier's [CLS] row. Evaluation is the forward pass, a third. Causal
attention counts in full, as in PaLM, so the figure is comparable across objectives.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class MatmulWeights:
    """Entries of the weight matrices a token meets, split by where they are applied."""

    per_token: int  # applied at every position: embedding projection, encoder blocks but the tail below
    per_output: int  # applied at each projected position: last block's out + FFN, head (vocabulary matrix, classifier)
    num_layers: int
    hidden_size: int

    @classmethod
    def of(cls, model: nn.Module) -> MatmulWeights:
        """Count the ``nn.Linear`` weights of a ``tiedemb.nn.Transformer`` or ``SequenceClassifier``.

        Counting the built modules instead of re-deriving shapes from the config keeps every
        head variant right, including ones added later.
        """
        per_token = sum(_linear_weights(part) for part in (model.embedding, model.encoder))
        blocks = model.encoder.blocks
        tail = _linear_weights(blocks[-1].attention.out) + _linear_weights(blocks[-1].ffn) if len(blocks) else 0
        return cls(
            per_token=per_token - tail,
            per_output=tail + sum(_linear_weights(part) for part in _heads(model)),
            num_layers=model.config.num_layers,
            hidden_size=model.config.hidden_size,
        )

    def training_flops(self, batch_size: int, seq_len: int, output_positions: int | None = None) -> float:
        """FLOPs of one forward + backward pass over ``batch_size`` sequences of ``seq_len``.

        ``output_positions``: the positions whose logits are computed (MLM: the masked ones);
        None means all of them.
        """
        tokens = batch_size * seq_len
        outputs = tokens if output_positions is None else output_positions
        dense = 6 * (tokens * self.per_token + outputs * self.per_output)
        attention = 12 * self.num_layers * seq_len * self.hidden_size * tokens
        return float(dense + attention)

    def forward_flops(self, batch_size: int, seq_len: int, output_positions: int | None = None) -> float:
        """FLOPs of the forward pass alone (evaluation): a third of ``training_flops``."""
        return self.training_flops(batch_size, seq_len, output_positions) / 3


def _heads(model: nn.Module) -> list[nn.Module]:
    # A language model's output head, or a classifier's pooler and classifier.
    names = ("head",) if hasattr(model, "head") else ("pooler", "classifier")
    return [part for part in (getattr(model, name, None) for name in names) if part is not None]


def _linear_weights(module: nn.Module) -> int:
    # A tied matrix is one Parameter but two uses (a lookup and a product); only the product is
    # a Linear, so the lookup never counts.
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))
