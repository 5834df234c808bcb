"""Fine-tuning, not only the forward pass, matches transformers' BertForSequenceClassification.

From the same weights (classifier included), without dropout, on the same batches, a few steps of
``GlueModule`` under a real Lightning ``Trainer`` (its own ``configure_optimizers``: AdamW without
decay on biases and norms, linear decay) land on the weights that transformers' model reaches
under the recipe a transformers user writes (``torch.optim.AdamW`` with the same two groups and
``get_linear_schedule_with_warmup``; no warmup here, as the two warmups differ in their first
step). What else separates the two in the MRPC benchmark is each side's random draws.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
from bert_helpers import TINY_BERT, pair_batch, save_tiny_bert
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

from tiedemb import GlueModule
from tiedemb.weights.bert import bert_to_tiedemb

STEPS = 6
LEARNING_RATE = 1e-3  # large, so that a wrong group, decay or schedule moves the weights visibly
WEIGHT_DECAY = 0.1


def batches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(2)
    out = []
    for _ in range(STEPS):
        batch = pair_batch()
        batch["input_ids"] = torch.randint(5, TINY_BERT["vocab_size"], batch["input_ids"].shape, generator=generator)
        batch["labels"] = torch.randint(0, 2, (batch["input_ids"].shape[0],), generator=generator)
        out.append(batch)
    return out


def train_transformers(model: BertForSequenceClassification, data: list[dict[str, torch.Tensor]]) -> None:
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LEARNING_RATE,
        eps=1e-8,
    )
    schedule = get_linear_schedule_with_warmup(optimizer, 0, STEPS)
    model.train()
    for batch in data:
        model(**batch).loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.end_to_end
def test_fine_tuning_steps_reach_the_weights_transformers_reaches(tmp_path):
    save_tiny_bert(tmp_path)
    config = BertConfig.from_pretrained(
        str(tmp_path), num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    reference = BertForSequenceClassification.from_pretrained(str(tmp_path), config=config)
    module = GlueModule(
        num_labels=2,
        pretrained=str(tmp_path),
        dropout=0.0,
        attention_dropout=0.0,
        learning_rate=LEARNING_RATE,
        weight_decay=WEIGHT_DECAY,
        warmup_steps=0,
        lr_decay="linear",
    )
    with torch.no_grad():  # the one part each side draws itself
        reference.classifier.weight.copy_(module.model.classifier.weight)
        reference.classifier.bias.copy_(module.model.classifier.bias)
    data = batches()
    probe = pair_batch()
    with torch.no_grad():
        before = module.eval()(**probe)
        torch.testing.assert_close(before, reference.eval()(**probe).logits, atol=1e-5, rtol=0)

    train_transformers(reference, data)
    trainer = L.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    )
    module.train()
    trainer.fit(module, train_dataloaders=DataLoader(data, batch_size=None, shuffle=False))
    assert trainer.global_step == STEPS

    with torch.no_grad():
        after = module.eval()(**probe)
        expected = reference.eval()(**probe).logits
    assert (after - before).abs().max() > 1e-2  # the steps moved the model
    torch.testing.assert_close(after, expected, atol=1e-4, rtol=0)
    # Every weight, not only what the probe reads: transformers' state in tiedemb's names.
    theirs = bert_to_tiedemb(reference.bert.state_dict(), TINY_BERT["num_hidden_layers"])
    theirs |= {f"classifier.{k}": v for k, v in reference.classifier.state_dict().items()}
    ours = module.model.state_dict()
    assert set(theirs) == set(ours)
    for name, value in ours.items():
        torch.testing.assert_close(value, theirs[name], atol=2e-5, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
