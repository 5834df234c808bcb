import pytest
import torch

from tiedemb.errors import UserError
from tiedemb.nn import HEADS, Transformer, TransformerConfig


def small(**overrides) -> TransformerConfig:
    settings = dict(
        vocab_size=97,
        hidden_size=32,
        num_layers=1,
        num_heads=4,
        intermediate_size=64,
        dropout=0.0,
        attention_dropout=0.0,
    )
    return TransformerConfig(**{**settings, **overrides})


@pytest.mark.parametrize("head", [h for h, head in HEADS.items() if head.tied])
@pytest.mark.parametrize("embedding_dim", [32, 16])
def test_tied_heads_share_one_parameter(head, embedding_dim):
    model = Transformer(small(head=head, embedding_dim=embedding_dim))
    assert model.head.decoder.weight is model.embedding.token.weight
    vocab_sized = [p for p in model.parameters() if p.shape[0] == 97]
    assert len(vocab_sized) == 1  # parameters() sees the shared matrix once


def gradients_of_both_uses(model: Transformer, ids: torch.Tensor, return_logits: bool):
    """The tied table's gradient from the model, and the sum of its two uses computed apart.

    Input use: the gradient reaching the looked-up rows, added back onto the rows each token
    read. Output use: the cross-entropy of ``features @ E.T + bias`` written out here, with its
    own copy of E, on the hidden states the encoder gave (every position is a target).
    """
    seen = {}

    def keep_lookup(module, args, output):
        output.retain_grad()
        seen["lookup"] = output

    def keep_hidden(module, args, output):
        seen["hidden"] = output

    hooks = [
        model.embedding.token.register_forward_hook(keep_lookup),
        model.encoder.register_forward_hook(keep_hidden),
    ]
    try:
        loss = model(ids, labels=ids, return_logits=return_logits).loss
        loss.backward()
    finally:
        for hook in hooks:
            hook.remove()
    table = model.embedding.token.weight
    input_use = torch.zeros_like(table).index_add_(0, ids.reshape(-1), seen["lookup"].grad.reshape(-1, table.shape[1]))
    output_table = table.detach().clone().requires_grad_(True)
    features = model.head.features(seen["hidden"].detach().reshape(-1, model.config.hidden_size))
    logits = features @ output_table.T + (model.head.bias if model.head.bias is not None else 0)
    written_out = torch.nn.functional.cross_entropy(logits, ids.reshape(-1))
    (output_use,) = torch.autograd.grad(written_out, output_table)
    torch.testing.assert_close(loss.detach(), written_out.detach())  # the loss the model computes is this one
    return table.grad, input_use, output_use


@pytest.mark.parametrize("return_logits", [True, False], ids=["logits", "sliced_loss"])
@pytest.mark.parametrize("head", [h for h, head in HEADS.items() if head.tied])
@pytest.mark.parametrize("embedding_dim", [32, 16])
def test_the_tied_table_gets_the_gradients_of_both_its_uses(head, embedding_dim, return_logits):
    torch.manual_seed(0)
    model = Transformer(small(head=head, embedding_dim=embedding_dim, objective="mlm"))
    ids = torch.randint(5, 97, (2, 8))
    gradient, input_use, output_use = gradients_of_both_uses(model, ids, return_logits)
    # Both uses contribute: a decoder that is a copy of the table, or reads it detached, loses the second.
    assert input_use.abs().sum() > 0 and output_use.abs().sum() > 0
    assert gradient is not None
    torch.testing.assert_close(gradient, input_use + output_use, rtol=1e-4, atol=1e-6)


def test_untied_head_has_its_own_matrix():
    model = Transformer(small(head="untied"))
    assert model.head.decoder.weight is not model.embedding.token.weight
    assert not model.is_tied


@pytest.mark.parametrize("embedding_dim", [32, 16])
def test_orthogonal_projection_is_orthogonal_at_init(embedding_dim):
    model = Transformer(small(head="tied_orth", embedding_dim=embedding_dim))
    weight = model.head.projection.weight  # (d_e, hidden): rows orthonormal
    torch.testing.assert_close(weight @ weight.T, torch.eye(embedding_dim), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shuffle,groups", [("half_swap", 2), ("channel_shuffle", 4), ("channel_shuffle", 8)])
def test_shuffle_is_a_permutation(shuffle, groups):
    head = Transformer(small(head="tied_shuffle", shuffle=shuffle, shuffle_groups=groups)).head
    permuted = head.transform(torch.eye(32))  # row i is where basis vector i goes
    assert torch.equal(permuted.sum(0), torch.ones(32)) and torch.equal(permuted.sum(1), torch.ones(32))
    assert set(permuted.unique().tolist()) == {0.0, 1.0}
    # almost every coordinate moves (ShuffleNet's shuffle keeps the first and last in place)
    assert permuted.trace() <= (0 if shuffle == "half_swap" else 2)


def test_half_swap_exchanges_halves():
    head = Transformer(small(head="tied_shuffle")).head
    x = torch.arange(32.0)
    assert torch.equal(head.transform(x), torch.cat((x[16:], x[:16])))


def test_scaled_init_draws_log_n_over_d():
    model = Transformer(small(vocab_size=5000, head="tied_scaled_init", hidden_size=64))
    std = model.embedding.token.weight.std().item()
    assert std == pytest.approx(torch.log(torch.tensor(5000.0)).item() / 64, rel=0.05)


def test_tied_down_map_starts_as_the_projection_transpose():
    model = Transformer(small(head="tied", embedding_dim=8))
    torch.testing.assert_close(model.head.down.weight, model.embedding.projection.weight.T)


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (dict(head="nonsense"), "valid: untied, tied, tied_scaled_init, tied_orth, untied_orth, tied_shuffle"),
        (dict(head="tied_shuffle", embedding_dim=15), "2 groups must divide model.embedding_dim"),
        (dict(head="tied_shuffle", shuffle="channel_shuffle", shuffle_groups=5), "model.shuffle_groups"),
    ],
)
def test_bad_head_settings_are_refused_with_the_parameter_named(overrides, needle):
    with pytest.raises(UserError, match=needle.replace(".", r"\.")):
        Transformer(small(**overrides))  # the head's name is checked by the registry, when it is built


@pytest.mark.parametrize("embedding_dim", [32, 8])
def test_untied_orth_is_tied_orth_with_its_own_output_matrix(embedding_dim):
    """The width study's control: BERT's transform on both heads, only the output matrix differs."""
    bert = dict(embedding_dim=embedding_dim, head_bias=True, head_activation="gelu", head_norm=True, output_bias=True)
    tied = Transformer(small(head="tied_orth", **bert))
    untied = Transformer(small(head="untied_orth", **bert))
    shapes = lambda model: {name: p.shape for name, p in model.head.named_parameters()}  # noqa: E731
    # The same transform parameters (dense weight and bias, LayerNorm weight and bias) and output bias.
    transform = {"projection.weight", "projection.bias", "norm.weight", "norm.bias", "bias"}
    assert transform <= set(shapes(untied)) and transform <= set(shapes(tied))
    assert {k: v for k, v in shapes(untied).items() if k in transform} == {
        k: v for k, v in shapes(tied).items() if k in transform
    }
    # Only the output matrix differs: the token table in the tied head, a parameter of its own here.
    assert tied.head.decoder.weight is tied.embedding.token.weight
    assert untied.head.decoder.weight is not untied.embedding.token.weight
    assert untied.head.decoder.weight.shape == untied.embedding.token.weight.shape == (97, embedding_dim)
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 97 * embedding_dim
    # The transform runs: GELU then LayerNorm give unit-variance features of width d_e.
    features = untied.head.features(torch.randn(4, 32))
    assert features.shape == (4, embedding_dim)
    torch.testing.assert_close(features.mean(-1), torch.zeros(4), atol=1e-5, rtol=0)


def test_untied_head_refuses_the_transform_settings():
    with pytest.raises(UserError, match="only the tied_orth or untied_orth head reads it"):
        small(head="untied", head_norm=True)
