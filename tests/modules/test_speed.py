"""The speed work keeps results: FLOPs arithmetic, compiled = eager, fused optimiser, perf metrics."""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from tiedemb import PretrainModule
from tiedemb.data import PretrainData
from tiedemb.modules.optim import adamw_with_schedule
from tiedemb.modules.throughput import MatmulWeights
from tiedemb.nn import Transformer, TransformerConfig

TINY = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, dropout=0.0, attention_dropout=0.0)


# -- FLOPs -----------------------------------------------------------------------------------------
def test_training_flops_match_a_hand_count():
    # d = 8, d_e = 4, f = 16, L = 2, n = 50, tied head (so a hidden -> d_e map before the decoder)
    config = TransformerConfig(
        vocab_size=50, hidden_size=8, embedding_dim=4, num_layers=2, num_heads=2, intermediate_size=16, head="tied"
    )
    weights = MatmulWeights.of(Transformer(config))
    # every position: embedding projection 4*8; first layer q,k,v 3*8*8 + out 8*8 + up/down 2*8*16;
    # last layer q,k,v only
    assert weights.per_token == 4 * 8 + (3 * 64 + 64 + 2 * 128) + 3 * 64  # 736
    # projected positions: last layer out + up/down, hidden -> d_e map 8*4, decoder 50*4
    assert weights.per_output == (64 + 2 * 128) + 8 * 4 + 50 * 4  # 552
    # 2 sequences of 5, 3 masked positions: 6 per weight per row, 12 * L * T * d per token for attention
    expected = 6 * (10 * 736 + 3 * 552) + 12 * 2 * 5 * 8 * 10
    assert weights.training_flops(2, 5, output_positions=3) == expected == 63696
    # every position projected (CLM): the plain PaLM count, 6 * N per token + attention
    assert weights.training_flops(2, 5) == 6 * 10 * (1056 + 232) + 12 * 2 * 5 * 8 * 10


def test_untied_and_bert_heads_count_their_own_matrices():
    untied = MatmulWeights.of(Transformer(TransformerConfig(vocab_size=50, head="untied", **TINY)))
    last_layer = 32 * 32 + 2 * 32 * 64  # out, up, down
    assert untied.per_output == last_layer + 50 * 32  # no transform: the decoder reads the hidden state
    bert = MatmulWeights.of(
        Transformer(
            TransformerConfig(
                vocab_size=50, head="tied_orth", head_bias=True, head_activation="gelu", head_norm=True, **TINY
            )
        )
    )
    assert bert.per_output == last_layer + 32 * 32 + 50 * 32


def test_a_classifier_counts_its_pooler_and_classifier_at_the_cls_row():
    from tiedemb.nn.classifier import SequenceClassifier

    config = TransformerConfig(vocab_size=50, objective="mlm", **TINY)
    last_layer = 32 * 32 + 2 * 32 * 64  # out, up, down: run at [CLS] only
    with_pooler = MatmulWeights.of(SequenceClassifier(config, num_labels=3))
    assert with_pooler.per_output == last_layer + 32 * 32 + 3 * 32
    assert MatmulWeights.of(SequenceClassifier(config, num_labels=3, pooler=False)).per_output == last_layer + 3 * 32
    # a batch of 2 sequences projects 2 positions; evaluation is the forward third
    assert (
        with_pooler.forward_flops(2, 8, output_positions=2) == with_pooler.training_flops(2, 8, output_positions=2) / 3
    )


# -- identical results -----------------------------------------------------------------------------
@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_training_loss_and_gradients_equal_the_full_logits_reference(objective):
    """The training path (no logits built, masked rows only for MLM) against the textbook loss
    on (B, T, vocab) logits, with a BERT-style head (transform + output bias) for MLM."""
    torch.manual_seed(0)
    head = dict(head="tied_orth", head_bias=True, head_activation="gelu", head_norm=True, output_bias=True)
    model = PretrainModule(vocab_size=100, objective=objective, **(head if objective == "mlm" else {}), **TINY)
    ids = torch.randint(5, 100, (3, 12))
    if objective == "mlm":
        labels = ids.masked_fill(torch.rand(ids.shape) > 0.3, -100)
    else:
        labels = ids.masked_fill(torch.arange(12) >= 10, -100)  # right padding has no targets
    output = model(ids, labels=labels, return_logits=False)
    assert output.logits is None
    output.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logits = model(ids).logits  # (B, T, vocab)
    if objective == "clm":
        logits, labels = logits[:, :-1], labels[:, 1:]
    reference = F.cross_entropy(logits.reshape(-1, 100), labels.reshape(-1), ignore_index=-100)
    reference.backward()
    torch.testing.assert_close(output.loss, reference)
    assert output.num_targets == int((labels != -100).sum())
    for grad, (name, parameter) in zip(grads, model.named_parameters()):
        torch.testing.assert_close(grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize(
    "layout",
    [
        dict(norm_position="post"),
        dict(norm_position="pre", position="rope"),
    ],
)
def test_encoding_selected_positions_equals_selecting_from_the_full_output(layout):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=60, **layout, **TINY))
    ids = torch.randint(5, 60, (3, 9))
    padding = torch.ones_like(ids)
    padding[1, 6:] = 0
    positions = torch.tensor([0, 4, 8, 10, 14, 20, 26])
    full = model.encode(ids, padding).reshape(-1, 32)
    torch.testing.assert_close(model.encode(ids, padding, positions=positions), full[positions])


def test_fused_qkv_is_q_then_k_then_v():
    """attention.qkv's rows are [W_q; W_k; W_v] and each head takes consecutive columns."""
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=50, **TINY)
    attention = Transformer(config).encoder.blocks[0].attention.eval()
    x = torch.randn(2, 7, 32)
    q, k, v = F.linear(x, attention.qkv.weight, attention.qkv.bias).chunk(3, dim=-1)
    heads = lambda t: t.view(2, 7, 2, 16).transpose(1, 2)  # noqa: E731
    scores = heads(q) @ heads(k).transpose(-1, -2) / 16**0.5
    y = (scores.softmax(-1) @ heads(v)).transpose(1, 2).reshape(2, 7, 32)
    torch.testing.assert_close(attention(x, None), attention.out(y))


def test_fused_adamw_steps_like_the_reference():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=60, **TINY))
    reference = Transformer(TransformerConfig(vocab_size=60, **TINY))
    reference.load_state_dict(model.state_dict())
    settings = dict(
        learning_rate=1e-2,
        weight_decay=0.1,
        betas=(0.9, 0.98),
        eps=1e-6,
        total_steps=10,
        warmup_steps=0,
        decay="constant",
        min_lr_ratio=0.0,
    )
    fused = adamw_with_schedule(model, **settings)["optimizer"]
    assert fused.defaults["fused"]
    plain = torch.optim.AdamW(
        [{**g, "params": list(g["params"])} for g in _groups(reference, 0.1)],
        lr=1e-2,
        betas=(0.9, 0.98),
        eps=1e-6,
        foreach=False,
    )
    ids = torch.randint(5, 60, (2, 8))
    labels = ids.masked_fill(torch.rand(ids.shape) > 0.5, -100)
    for _ in range(3):
        for net, optimizer in ((model, fused), (reference, plain)):
            optimizer.zero_grad()
            net(ids, labels=labels).loss.backward()
            optimizer.step()
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name, atol=1e-6, rtol=1e-5)


def _groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    from tiedemb.modules.optim import parameter_groups

    return parameter_groups(model, weight_decay)


def _can_compile() -> str | None:
    """Why torch.compile cannot run here, or None when it can."""
    try:
        torch.compile(lambda t: t * 2 + 1)(torch.ones(2))
    except Exception as error:  # no C compiler, unsupported Python, ...
        return f"torch.compile does not run on this platform: {type(error).__name__}: {error}"[:300]
    return None


@pytest.mark.parametrize("objective", ["mlm", "clm"])
@pytest.mark.end_to_end
def test_compiled_model_gives_the_eager_loss_and_keeps_checkpoint_keys(objective):
    reason = _can_compile()
    if reason:
        pytest.skip(reason)
    torch.manual_seed(0)
    module = PretrainModule(vocab_size=100, objective=objective, compile=True, **TINY)
    ids = torch.randint(5, 100, (2, 16))
    labels = ids.masked_fill(torch.rand(ids.shape) > 0.3, -100) if objective == "mlm" else ids
    eager = module(ids, labels=labels).loss
    eager.backward()
    eager_grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    keys = list(module.state_dict())
    module.configure_model()
    compiled = module(ids, labels=labels).loss
    compiled.backward()
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
    for grad, parameter in zip(eager_grads, module.parameters()):
        torch.testing.assert_close(parameter.grad, grad, atol=1e-5, rtol=1e-4)
    assert list(module.state_dict()) == keys  # no _orig_mod. prefixes


# -- perf metrics ----------------------------------------------------------------------------------
def _csv_metrics(root) -> list[dict[str, str]]:
    import csv
    from pathlib import Path

    with open(next(Path(root).rglob("metrics.csv")), newline="") as handle:
        return list(csv.DictReader(handle))


def _last(rows: list[dict[str, str]], name: str) -> float | None:
    values = [float(row[name]) for row in rows if row.get(name)]
    return values[-1] if values else None


@pytest.mark.parametrize("peak_flops", [None, 1e9])
@pytest.mark.end_to_end
def test_fit_logs_throughput_and_mfu_only_with_a_peak(tmp_path, peak_flops):
    from lightning.pytorch.loggers import CSVLogger

    from tiedemb.modules.throughput import ModelThroughput

    data = PretrainData(vocab_size=200, block_size=16, batch_size=4, synthetic_tokens=4096, synthetic_val_tokens=512)
    module = PretrainModule(vocab_size=data.vocab_size, peak_flops=peak_flops, **TINY)
    trainer = L.Trainer(
        max_steps=5,
        logger=CSVLogger(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        accelerator="cpu",
        callbacks=[ModelThroughput(window_size=3)],
        log_every_n_steps=1,
    )
    trainer.fit(module, datamodule=data)
    rows = _csv_metrics(tmp_path)
    flops_per_sec, tokens_per_sec = _last(rows, "train/device/flops_per_sec"), _last(rows, "train/device/items_per_sec")
    assert flops_per_sec > 0 and tokens_per_sec > 0
    # the module's own count: flops per token of an MLM batch lie between the all-positions count and none
    weights = MatmulWeights.of(module.model)
    assert flops_per_sec / tokens_per_sec <= weights.training_flops(4, 16) / 64
    if peak_flops is None:
        assert _last(rows, "train/device/mfu") is None  # a CPU has no peak in either table
    else:
        assert _last(rows, "train/device/mfu") == pytest.approx(flops_per_sec / peak_flops)
