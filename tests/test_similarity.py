"""The zero-shot similarity probe: its ROC-AUC against a hand count, the command and a sweep study of it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from bert_helpers import save_tiny_bert, write_mrpc
from tiny_vocab import TINY_VOCAB

from tiedemb.cli import main
from tiedemb.experiments.evidence import PAIRED_DIFFERENCE, PAIRED_INTERVAL, zero_shot_table
from tiedemb.experiments.runs import Run
from tiedemb.modules.similarity import (
    SCORES_FILE,
    bootstrap_auroc,
    paired_auroc_difference,
    read_scores,
    write_scores,
)

ROOT = Path(__file__).resolve().parents[1]


def hand_auroc(scores: list[float], labels: list[int]) -> float:
    """The share of (paraphrase, non-paraphrase) pairs ranked the right way round, ties counting half."""
    positives = [s for s, y in zip(scores, labels) if y == 1]
    negatives = [s for s, y in zip(scores, labels) if y == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def test_roc_auc_is_the_share_of_pairs_ranked_right_and_its_interval_holds_it():
    scores = [0.9, 0.8, 0.35, 0.7, 0.1, 0.4, 0.6, 0.2, 0.65, 0.3]
    labels = [1, 1, 1, 0, 0, 1, 0, 0, 1, 0]
    found = bootstrap_auroc(torch.tensor(scores), torch.tensor(labels), samples=300)
    assert found.auroc == pytest.approx(hand_auroc(scores, labels))
    assert found.low < found.auroc < found.high and found.examples == 10
    perfect = bootstrap_auroc(torch.tensor([0.1, 0.2, 0.8, 0.9]), torch.tensor([0, 0, 1, 1]), samples=50)
    assert (perfect.auroc, perfect.low, perfect.high) == (1.0, 1.0, 1.0)


def correlated_probes(pairs: int = 400, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two probes of the same pairs: each pair's difficulty is shared, each probe adds a little noise."""
    generator = torch.Generator().manual_seed(seed)
    labels = (torch.rand(pairs, generator=generator) < 0.6).long()
    difficulty = torch.randn(pairs, generator=generator)
    shared = labels * 1.0 + difficulty
    first = shared + 0.1 * torch.randn(pairs, generator=generator)
    second = shared + 0.1 * torch.randn(pairs, generator=generator) - 0.3 * labels  # ranks a little worse
    return first, second, labels


def test_the_paired_difference_is_the_difference_of_hand_counts_and_narrower_than_either_interval():
    first, second, labels = correlated_probes()
    paired = paired_auroc_difference(first, second, labels, samples=300)
    by_hand = hand_auroc(first.tolist(), labels.tolist()) - hand_auroc(second.tolist(), labels.tolist())
    assert paired.difference == pytest.approx(by_hand, abs=1e-6)
    assert paired.low < paired.difference < paired.high
    alone = [bootstrap_auroc(scores, labels, samples=300) for scores in (first, second)]
    assert all(paired.high - paired.low < (one.high - one.low) / 2 for one in alone)
    assert paired.low > 0  # the shared difficulty cancels, so this small, real difference is resolved
    same = paired_auroc_difference(first, first, labels, samples=50)
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same pairs"):
        paired_auroc_difference(first, second[:-1], labels)


def test_pair_scores_read_back_as_written(tmp_path):
    first, _, labels = correlated_probes(pairs=20)
    write_scores(tmp_path, first, labels)
    scores, read_labels = read_scores(tmp_path / SCORES_FILE)
    assert torch.equal(read_labels, labels) and torch.equal(scores, first.double())


def probe_run(folder: Path, d_e: str, scores: torch.Tensor, labels: torch.Tensor, narrowed: bool) -> Run:
    folder.mkdir(parents=True)
    write_scores(folder, scores, labels)
    found = bootstrap_auroc(scores, labels, samples=20)
    metrics = {"zero_shot/auroc": found.auroc, "zero_shot/auroc_low": found.low, "zero_shot/auroc_high": found.high}
    metrics["zero_shot/examples"] = float(len(labels))
    if narrowed:
        metrics["narrow/kept_token"] = 0.5
    return Run(
        id=folder.name,
        folder=folder,
        labels={"d_e": d_e},
        state="finished",
        study="similarity",
        metrics={name: {0: value} for name, value in metrics.items()},
    )


def test_the_report_pairs_each_narrowed_probe_with_the_full_width_one(tmp_path):
    first, second, labels = correlated_probes()
    runs = [
        probe_run(tmp_path / "full", "384", first, labels, narrowed=False),
        probe_run(tmp_path / "narrow", "64", second, labels, narrowed=True),
        probe_run(tmp_path / "other-pairs", "32", second[:-1], labels[:-1], narrowed=True),
    ]
    rows = {row["d_e"]: row for row in zero_shot_table(runs).rows}
    expected = paired_auroc_difference(second, first, labels)
    assert rows["64"][PAIRED_DIFFERENCE] == pytest.approx(expected.difference) and expected.difference < 0
    assert rows["64"][PAIRED_INTERVAL] == f"[{expected.low:+.3f}, {expected.high:+.3f}]"
    assert rows["384"][PAIRED_DIFFERENCE] is None  # the reference itself
    assert rows["32"][PAIRED_DIFFERENCE] is None  # other pairs: nothing to pair


@pytest.fixture
def probe_inputs(tmp_path, tiny_tokenizer_dir):
    bert = tmp_path / "bert"
    save_tiny_bert(bert, vocab_size=len(TINY_VOCAB))
    return {"bert": bert, "glue": write_mrpc(tmp_path / "glue"), "tokenizer": tiny_tokenizer_dir}


@pytest.mark.end_to_end
def test_the_command_logs_the_probe_with_the_default_loggers(tmp_path, probe_inputs, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default loggers write under ./runs
    main(
        [
            "similarity",
            "--config",
            str(ROOT / "configs/glue/mrpc.yaml"),
            f"--model.pretrained={probe_inputs['bert']}",
            f"--data.tokenizer={probe_inputs['tokenizer']}",
            f"--data.data_dir={probe_inputs['glue']}",
            "--model.embedding_dim=16",
            "--samples=100",
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ]
    )
    assert "zero-shot ROC-AUC" in capsys.readouterr().out
    found = sorted((tmp_path / "runs").rglob("metrics.csv"))
    rows = list(csv.DictReader(open(found[-1])))
    values = {key: float(value) for row in rows for key, value in row.items() if value and key != "step"}
    # identical sentences score a cosine of 1: every paraphrase ranks above every non-paraphrase
    assert values["zero_shot/auroc"] == pytest.approx(1.0, abs=1e-6) and values["zero_shot/examples"] == 24
    assert 0 < values["narrow/kept_position"] <= 1 and values["narrow/kept_token"] < 1  # 48 -> 16 wide


@pytest.mark.end_to_end
def test_a_sweep_study_runs_the_probe_and_the_report_tables_it(tmp_path, probe_inputs):
    sweep = tmp_path / "probe.yaml"
    sweep.write_text(
        json.dumps(
            {
                "name": "probe",
                "wandb": False,
                "studies": {
                    "zero_shot": {
                        "command": "similarity",
                        "configs": [str(ROOT / "configs/glue/mrpc.yaml")],
                        "overrides": {
                            "model.pretrained": str(probe_inputs["bert"]),
                            "data.tokenizer": str(probe_inputs["tokenizer"]),
                            "data.data_dir": str(probe_inputs["glue"]),
                        },
                        "grid": {"model.embedding_dim": [16, 48]},
                    }
                },
            }
        )
    )
    from tiedemb.report import main as report
    from tiedemb.sweep import main as run_sweep

    assert run_sweep([str(sweep), "--out", str(tmp_path / "out")]) == 0
    assert report([str(tmp_path / "out")]) == 0
    rows = {row["d_e"]: row for row in csv.DictReader(open(tmp_path / "out" / "zero_shot.csv"))}
    assert set(rows) == {"16", "48"} and float(rows["16"]["ROC-AUC"]) == pytest.approx(1.0, abs=1e-6)
    assert rows["48"]["kept token"] == ""  # not narrowed at the source's own width
    # both rank every pair right: the paired difference from the full width (48) and its interval are 0
    low, high = (float(end) for end in rows["16"][PAIRED_INTERVAL].strip("[]").split(","))
    assert float(rows["16"][PAIRED_DIFFERENCE]) == pytest.approx(0.0, abs=1e-6)
    assert low == pytest.approx(0.0, abs=1e-3) and high == pytest.approx(0.0, abs=1e-3)
    assert rows["48"][PAIRED_DIFFERENCE] == ""
