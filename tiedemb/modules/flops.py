"""Model FLOPs of a training step (PaLM's count), what MFU divides by a device's peak.

The count is PaLM's (Chowdhery et al. 2022, appendix B): a weight matrix of N entries costs
2N FLOPs per row it multiplies in the forward pass and 4N in the backward pass (gradients for
the input and for the weight), so 6N per row in a training step; attention adds the two
T x T x d products (scores and weighted values) of every layer, 12 * L * T * d per token in a
step. Two refinements make the figure the work the model really does:

* the output projection (the vocabulary matrix and any head transform before it) is counted
  only at the positions projected: every position for CLM, the masked ones for MLM, whose
  logits are computed only there. So are the last block's attention output projection and
  feed-forward, which the encoder runs only at those positions (its queries, keys and values,
  like every other block, at all of them);
* embedding lookups cost nothing (they are gathers), and vectors (biases, norm gains) are
  ignored, as PaLM does: they add O(d) per token against O(d^2).

A sequence classifier is counted the same way, its pooler and classifier being the head and its
[CLS] row the one projected position of each sequence. Evaluation runs the forward pass only,
a third of a training step.

As in PaLM, causal attention is counted in full although half of the score matrix is masked:
the figure is comparable across objectives, not a count of the kernel's multiply-adds.
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
