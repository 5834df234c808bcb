"""The training monitor: gradient norms per part, token-table statistics, the self-logit margin."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from tiny_runs import TINY_TIED

from tiedemb.cli import main
from tiedemb.nn import Transformer, TransformerConfig
from tiedemb.training import metric_names as names
from tiedemb.training.monitor import TrainingMonitor, gradient_norms, probe_from, row_norms, self_logit_margin

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def tiny_model(head: str = "tied") -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, head=head, objective="clm"
    )
    return Transformer(config)


def test_the_part_norms_make_up_the_total_and_each_part_holds_its_own_gradients():
    model = tiny_model("untied")
    ids = torch.randint(0, 50, (2, 8))
    model(ids, labels=ids).loss.backward()
    found = gradient_norms(model)
    parts = [found[names.grad_norm_name(part)] for part in names.GRAD_NORM_PARTS]
    assert all(value > 0 for value in parts)
    assert found[names.GRAD_NORM_TOTAL] == pytest.approx(math.sqrt(sum(value**2 for value in parts)))
    # only the embedding's gradients left: the other parts read 0 and the total is the embedding's
    for name, parameter in model.named_parameters():
        if not name.startswith("embedding."):
            parameter.grad = None
    found = gradient_norms(model)
    assert found[names.grad_norm_name("encoder")] == found[names.grad_norm_name("head")] == 0.0
    assert found[names.GRAD_NORM_TOTAL] == pytest.approx(found[names.grad_norm_name("embedding")])


def test_row_norms_are_the_mean_and_spread_of_the_token_rows():
    table = torch.tensor([[3.0, 4.0], [0.0, 1.0], [0.0, 0.0]])
    found = row_norms(table)
    assert found[names.ROW_NORM_MEAN] == pytest.approx(2.0)
    assert found[names.ROW_NORM_STD] == pytest.approx(torch.tensor([5.0, 1.0, 0.0]).std().item())


def test_the_self_logit_margin_is_the_log_odds_of_the_input_token():
    """logit_i - logsumexp(others) = log(p_i / (1 - p_i)): checked against the softmax of a full forward."""
    model = tiny_model("tied")
    ids = torch.randint(1, 50, (2, 8))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    margin = self_logit_margin(model, {"input_ids": ids, "attention_mask": mask})
    model.eval()
    with torch.no_grad():
        p = model(ids, mask).logits.float().softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    expected = torch.log(p / (1 - p))[mask.bool()].mean().item()
    assert margin == pytest.approx(expected, rel=1e-4, abs=1e-4)
    # A table scaled up makes a tied model predict the token it is given: the margin grows.
    with torch.no_grad():
        model.embedding.token.weight.mul_(20)
    assert self_logit_margin(model, {"input_ids": ids, "attention_mask": mask}) > margin + 1


def test_a_masked_language_model_probe_holds_the_text_not_the_masks():
    batch = {
        "input_ids": torch.tensor([[5, 103, 7, 103]]),
        "labels": torch.tensor([[-100, 6, -100, 8]]),
        "attention_mask": torch.ones(1, 4, dtype=torch.long),
    }
    probe = probe_from(batch, sequences=1, length=3)
    assert probe["input_ids"].tolist() == [[5, 6, 7]]
    assert probe["attention_mask"].shape == (1, 3)


def test_an_interval_below_one_is_refused_by_the_parser():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(TrainingMonitor, "monitor")
    assert parser.parse_args(["--monitor.every_n_steps=3"]).monitor.every_n_steps == 3
    with pytest.raises(Exception, match="every_n_steps"):
        parser.parse_args(["--monitor.every_n_steps=0"])


@pytest.mark.end_to_end
def test_a_pretraining_run_logs_them_on_its_interval_into_its_csv(tmp_path, monkeypatch):
    """The CLI adds the monitor to every pretraining run; trainer.log_every_n_steps sets its interval."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path)}}
    main(
        [
            "fit",
            *TINY_TIED,
            "--trainer.max_steps=6",
            "--trainer.log_every_n_steps=2",
            "--trainer.val_check_interval=3",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.logger={json.dumps([logger])}",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    (metrics,) = tmp_path.rglob("metrics.csv")
    with open(metrics, newline="") as handle:
        rows = list(csv.DictReader(handle))
    logged_at = lambda name: sorted({int(row["step"]) for row in rows if row.get(name)})  # noqa: E731
    for name in (names.GRAD_NORM_TOTAL, *map(names.grad_norm_name, names.GRAD_NORM_PARTS), names.ROW_NORM_MEAN):
        assert logged_at(name) == [0, 2, 4], name
    assert logged_at(names.ROW_NORM_STD) == [0, 2, 4]
    assert logged_at(names.SELF_LOGIT_MARGIN) == [0, 2, 4]
    assert logged_at(names.EFFECTIVE_RANK) == [3, 6]
    rank = next(float(row[names.EFFECTIVE_RANK]) for row in rows if row.get(names.EFFECTIVE_RANK))
    assert 1.0 < rank <= 64.0  # at most the table's width (hidden_size 64 in the tiny scale)
