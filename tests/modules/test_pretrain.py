import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from tiedemb import PretrainModule
from tiedemb.data import PretrainData
from tiedemb.modules.pretrain import TrainingDiverged
from tiedemb.nn import HEADS

TINY = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, dropout=0.0, attention_dropout=0.0)


def tiny_data(objective: str = "mlm") -> PretrainData:
    return PretrainData(
        vocab_size=200,
        block_size=16,
        batch_size=4,
        objective=objective,
        synthetic_tokens=4096,
        synthetic_val_tokens=512,
    )


def tiny_trainer(tmp_path, **overrides) -> L.Trainer:
    settings = dict(
        max_steps=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        limit_val_batches=2,
        val_check_interval=3,
        accelerator="cpu",
    )
    return L.Trainer(**{**settings, **overrides})


def test_builds_from_the_documented_keywords():
    model = PretrainModule(
        vocab_size=30522,
        objective="mlm",
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        intermediate_size=1024,
        embedding_dim=256,
    )
    assert model.model.is_tied
    assert model.model.embedding.token.weight.shape == (30522, 256)


@pytest.mark.parametrize("head", ["tied", "tied_orth", "tied_shuffle", "tied_scaled_init", "untied", "untied_orth"])
@pytest.mark.end_to_end
def test_checkpoint_reload_keeps_the_tie_and_the_weights(tmp_path, head):
    data = tiny_data()
    model = PretrainModule(vocab_size=data.vocab_size, head=head, embedding_dim=16, **TINY)
    trainer = tiny_trainer(tmp_path)
    trainer.fit(model, datamodule=data)
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    reloaded = PretrainModule.load_from_checkpoint(path)
    assert reloaded.hparams.head == head
    assert reloaded.model.is_tied == HEADS[head].tied
    vocab_matrices = [p for p in reloaded.parameters() if p.shape[0] == data.vocab_size and p.ndim == 2]
    assert len(vocab_matrices) == (1 if HEADS[head].tied else 2)
    for (name, saved), loaded in zip(model.state_dict().items(), reloaded.state_dict().values()):
        torch.testing.assert_close(saved, loaded, msg=name)


def test_masked_only_loss_equals_full_logits_loss_with_equal_gradients():
    torch.manual_seed(0)
    model = PretrainModule(vocab_size=200, head="tied_orth", **TINY)
    batch = next(iter(_loader()))
    masked = model(**batch)
    masked.loss.backward()
    masked_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full_logits = model(batch["input_ids"], batch["attention_mask"]).logits  # (B, T, vocab)
    full = F.cross_entropy(full_logits.reshape(-1, 200), batch["labels"].reshape(-1), ignore_index=-100)
    full.backward()
    torch.testing.assert_close(masked.loss, full)
    for masked_grad, parameter in zip(masked_grads, model.parameters()):
        torch.testing.assert_close(masked_grad, parameter.grad, atol=1e-6, rtol=1e-5)
    assert masked.logits.shape == (int((batch["labels"] != -100).sum()), 200)


def _loader():
    data = tiny_data()
    data.setup("fit")
    return data.train_dataloader()


def test_forward_follows_the_hugging_face_convention():
    model = PretrainModule(vocab_size=200, objective="clm", **TINY)
    ids = torch.randint(5, 200, (2, 10))
    output = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
    expected = F.cross_entropy(output.logits[:, :-1].reshape(-1, 200), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(output.loss, expected)
    assert output.logits.shape == (2, 10, 200)


@pytest.mark.end_to_end
def test_fit_logs_initial_loss_and_its_prediction(tmp_path):
    data = tiny_data("clm")
    model = PretrainModule(
        vocab_size=data.vocab_size,
        objective="clm",
        position="rope",
        type_vocab_size=0,
        norm_position="pre",
        residual_init="zero",
        **TINY,
    )
    trainer = tiny_trainer(tmp_path)
    trainer.fit(model, datamodule=data)
    assert model.initial_loss == pytest.approx(model.described["init/loss_pred"], rel=0.05)
    assert model.described["init/log_n"] == pytest.approx(math.log(200))
    assert model.described["data/entropy_rate"] == pytest.approx(data.corpus.entropy_rate)
    assert "val/loss" in trainer.callback_metrics and "train/loss" in trainer.callback_metrics


@pytest.mark.end_to_end
def test_non_finite_loss_stops_with_the_step_named(tmp_path):
    data = tiny_data()
    model = PretrainModule(vocab_size=data.vocab_size, learning_rate=1e30, warmup_steps=0, lr_decay="constant", **TINY)
    with pytest.raises(TrainingDiverged, match=r"at step \d+"):
        tiny_trainer(tmp_path, max_steps=50, val_check_interval=50).fit(model, datamodule=data)
