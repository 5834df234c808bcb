"""What a built model does at the embedding and at the output, and the theory's prediction for it.

The prediction is ``tiedemb.theory.predict_initial_loss`` (docs/science.md §1) given the
architecture's facts: the token table's std and width, the input scale (Gemma's √d), the learned
position and segment tables added before the norm, the head (plain tied, tied behind BERT's
dense → GELU → LayerNorm transform, or untied), the output scale (T5's d^-½) and the soft-cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiedemb.theory import Prediction, predict_initial_loss
from tiedemb.weights.audit.families import Family


@dataclass(frozen=True)
class Architecture:
    model_type: str
    class_name: str
    family: Family
    vocab_size: int
    hidden_size: int
    table_width: int  # the token table's width (ALBERT's embedding_size; the hidden size elsewhere)
    layers: int
    tied: bool
    token_std: float
    input_scale: float
    output_scale: float  # on what meets the output matrix (T5's d^-1/2)
    norm_gain: float  # the final norm's weight at initialisation
    softcap: float | None
    final_norm: str  # the final norm's class, or "none (post-norm)"
    parameters: int

    @property
    def head(self) -> str:
        """The project's head that does what this model's head does at initialisation."""
        if not self.tied:
            return "untied"
        # BERT's transform is random dense -> GELU -> LayerNorm: like tied_orth, it decorrelates the
        # vector meeting the table from the input token's row.
        return "tied_orth" if self.family.head_transform else "tied"


def describe_model(model: Any, config: Any, family: Family) -> Architecture:
    table = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    norm = model.get_submodule(family.final_norm) if family.final_norm else None
    return Architecture(
        model_type=config.model_type,
        class_name=type(model).__name__,
        family=family,
        vocab_size=int(table.shape[0]),
        hidden_size=int(config.hidden_size),
        table_width=int(table.shape[1]),
        layers=int(config.num_hidden_layers),
        tied=head is table or head.data_ptr() == table.data_ptr(),
        token_std=family.token_std(config),
        input_scale=family.input_multiplier(config),
        output_scale=family.output_multiplier(config),
        norm_gain=family.norm_gain(config),
        softcap=getattr(config, "final_logit_softcapping", None) or None,
        final_norm=type(norm).__name__ if norm is not None else "none (post-norm)",
        parameters=sum(p.numel() for p in model.parameters()),
    )


def predict(
    arch: Architecture,
    *,
    repeat_rate: float,
    branch_ratio: float = 0.0,
    head: str | None = None,
    token_std: float | None = None,
) -> Prediction:
    """The predicted initial loss; ``head`` and ``token_std`` replace the model's for a remedy.

    ``repeat_rate``: the share of scored positions whose target is the token the head reads (a
    repeated token; a masked-LM position kept unchanged). ``branch_ratio`` 0 is the theory's
    near-identity network; the measured ratio counts the branches' output as noise.
    """
    std = arch.token_std if token_std is None else token_std
    # Behind a transform, what meets the table is a LayerNorm-ed vector of the table's width.
    width = arch.table_width if arch.family.head_transform else arch.hidden_size
    return predict_initial_loss(
        vocab_size=arch.vocab_size,
        hidden_size=width,
        embedding_dim=width,
        # Positions, segments and an untied matrix (the untie remedy's too) keep the model's own std.
        init_std=arch.token_std,
        head=head or arch.head,
        objective="clm",  # repeats are counted in the batch itself (repeat_rate)
        position="learned" if arch.family.positions else "rope",
        type_vocab_size=1 if arch.family.segments else 0,
        repeat_rate=repeat_rate,
        # The final norm's gain multiplies what meets the output matrix as the output scale does.
        output_scale=arch.output_scale * arch.norm_gain,
        embedding_scale=arch.input_scale,
        embedding_init_std=std,
        branch_ratio=branch_ratio,
        logit_softcap=arch.softcap,
    )
