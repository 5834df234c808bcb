"""The names a config accepts and the tables that build them agree, wherever the names are used."""

from __future__ import annotations

import pytest

from tiedemb.errors import UserError
from tiedemb.nn import HEADS, Transformer, TransformerConfig
from tiedemb.nn.config import ACTIVATIONS, NORMS
from tiedemb.nn.layers import ACTIVATION_FUNCTIONS, NORM_CLASSES
from tiedemb.theory import predict_initial_loss

HEAD_NAMES = ("untied", "tied", "tied_scaled_init", "tied_orth", "untied_orth", "tied_shuffle")
"""The heads configs and docs name, in the order messages list them."""


def test_head_registry_holds_the_shipped_heads_in_order():
    assert tuple(HEADS) == HEAD_NAMES


def test_norm_and_activation_tables_hold_exactly_the_named_ones():
    assert tuple(NORM_CLASSES) == NORMS
    assert ("none", *ACTIVATION_FUNCTIONS) == ACTIVATIONS  # "none" is the heads' "no activation"


@pytest.mark.parametrize("head", HEAD_NAMES)
def test_every_head_name_builds_and_has_a_prediction(head):
    config = TransformerConfig(vocab_size=50, hidden_size=16, num_heads=2, num_layers=1, head=head)
    assert type(Transformer(config).head) is HEADS[head]
    assert predict_initial_loss(vocab_size=50, hidden_size=16, head=head).loss > 0


def test_an_unknown_head_is_refused_by_model_and_theory_alike():
    config = TransformerConfig(vocab_size=50, hidden_size=16, num_heads=2, num_layers=1, head="tied_twice")
    with pytest.raises(
        UserError, match="model.head='tied_twice' is not a known choice; valid: " + ", ".join(HEAD_NAMES)
    ):
        Transformer(config)
    with pytest.raises(ValueError, match="valid: " + ", ".join(HEAD_NAMES)):
        predict_initial_loss(vocab_size=50, hidden_size=16, head="tied_twice")
