"""The zero-shot similarity probe: its ROC-AUC against a hand count, the command and a sweep study of it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bert_helpers import save_tiny_bert, write_mrpc
from tiny_vocab import TINY_VOCAB

from tiedemb.cli import main
from tiedemb.modules.similarity import bootstrap_auroc

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
    assert report([str(tmp_path / "out"), "--no-wandb", "--no-analysis"]) == 0
    rows = {row["d_e"]: row for row in csv.DictReader(open(tmp_path / "out" / "zero_shot.csv"))}
    assert set(rows) == {"16", "48"} and float(rows["16"]["ROC-AUC"]) == pytest.approx(1.0, abs=1e-6)
    assert rows["48"]["kept token"] == ""  # not narrowed at the source's own width


def csv_values(folder: Path) -> dict[str, float]:
    found = sorted(folder.rglob("metrics.csv"))
    rows = list(csv.DictReader(open(found[-1])))
    return {key: float(value) for row in rows for key, value in row.items() if value and key != "step"}


@pytest.mark.end_to_end
@pytest.mark.parametrize("subcommand", ["similarity", "fit"])
def test_readapting_the_narrowed_embedding_lowers_its_output_error_before_use(tmp_path, probe_inputs, subcommand):
    # A process per run, as a user runs it: one W&B run per process.
    extra = (
        ["--samples=50"] if subcommand == "similarity" else ["--trainer.max_steps=1", "--trainer.limit_val_batches=1"]
    )
    command = [
        sys.executable,
        str(ROOT / "main.py"),
        subcommand,
        "--config",
        str(ROOT / "configs/glue/mrpc.yaml"),
        f"--model.pretrained={probe_inputs['bert']}",
        f"--data.tokenizer={probe_inputs['tokenizer']}",
        f"--data.data_dir={probe_inputs['glue']}",
        "--model.embedding_dim=8",
        "--model.readapt_steps=60",
        "--model.readapt_learning_rate=0.01",
        "--data.max_length=32",
        *extra,
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "re-adapted the narrowed embedding in 60 steps" in done.stderr
    runs = tmp_path / "runs"  # the default loggers write under ./runs
    values = csv_values(runs)
    assert values["narrow/readapt_mse_after"] < values["narrow/readapt_mse_before"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["--model.pretrained=null"], "model.readapt_steps=5 has no effect without model.pretrained"),
        (
            ["--model.embedding_dim=48"],
            "model.readapt_steps=5 has no effect here: the pretrained embedding is not narrowed",
        ),
    ],
)
def test_readapting_what_is_not_narrowed_is_refused(tmp_path, probe_inputs, capsys, settings, message):
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "similarity",
                "--config",
                str(ROOT / "configs/glue/mrpc.yaml"),
                f"--model.pretrained={probe_inputs['bert']}",
                f"--data.tokenizer={probe_inputs['tokenizer']}",
                f"--data.data_dir={probe_inputs['glue']}",
                "--model.readapt_steps=5",
                f"--trainer.default_root_dir={tmp_path / 'runs'}",
                *settings,
            ]
        )
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
