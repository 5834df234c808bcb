import pytest

from tiedemb import PretrainModule
from tiedemb.errors import UserError
from tiedemb.nn import TransformerConfig
from tiedemb.options import class_parameters


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (dict(embedding_dim=1024), "model.embedding_dim"),
        (dict(hidden_size=250, num_heads=4), "model.hidden_size (250) must be divisible by model.num_heads (4)"),
    ],
)
def test_impossible_configs_name_the_parameter(overrides, needle):
    with pytest.raises(UserError) as raised:
        TransformerConfig(vocab_size=100, **overrides)
    assert needle in str(raised.value)


def test_module_defaults_match_the_config_defaults():
    """PretrainModule takes every config field; what is left unset is the config's default."""
    assert set(TransformerConfig.field_names()) <= set(class_parameters(PretrainModule))
    module = PretrainModule(vocab_size=10)
    assert module.config.to_dict() == TransformerConfig(vocab_size=10).to_dict()
