"""Chained studies: a study's cells start from another study's checkpoints."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from tiedemb.errors import UserError
from tiedemb.experiments import cells as sweep_module
from tiedemb.experiments import layout
from tiedemb.experiments.cells import cell_args, run_sweep
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
PRETRAIN_CONFIGS = [str(CONFIGS / "tied.yaml"), str(CONFIGS / "scale" / "tiny.yaml")]
MRPC_CONFIGS = [str(CONFIGS / "glue" / "mrpc.yaml")]


def write_sweep(folder: Path, content: dict) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
    return path


def chain_sweep(
    folder: Path, chain: dict | None = None, pretrain: dict | None = None, mrpc: dict | None = None
) -> Path:
    """mrpc (listed first) starts from pretrain: d_e in {16, 32}, pretrained at seed 0 only."""
    return write_sweep(
        folder,
        {
            "name": "c",
            "wandb": False,
            "studies": {
                "mrpc": {
                    "configs": MRPC_CONFIGS,
                    "pretrained_from": chain or {"study": "pretrain", "match": ["d_e"], "labels": {"seed": 0}},
                    "grid": {"model.embedding_dim": [16, 32], "seed_everything": [0, 1]},
                    **(mrpc or {}),
                },
                "pretrain": {
                    "configs": PRETRAIN_CONFIGS,
                    "grid": {"model.embedding_dim": [16, 32], "seed_everything": [0]},
                    **(pretrain or {}),
                },
            },
        },
    )


@pytest.fixture
def fake_runs(monkeypatch):
    """Cells 'run' by writing a last checkpoint; cells whose id is in ``failing`` exit 1. Records commands by cell."""
    calls: dict[str, list[list[str]]] = {}
    failing: set[str] = set()

    def run_logged(command, log_file, workdir, heading, threads=None):
        folder = Path(log_file).parent
        cell_id = f"{folder.parent.name}/{folder.name}"
        calls.setdefault(cell_id, []).append(command)
        log_file.write_text("error: boom\n" if cell_id in failing else "ok\n")
        if cell_id in failing:
            return 1
        checkpoints = folder / "checkpoints"  # the cell's folder is its run's folder
        checkpoints.mkdir(parents=True, exist_ok=True)
        (checkpoints / "last.ckpt").write_bytes(b"")
        return 0

    monkeypatch.setattr(sweep_module, "_run_logged", run_logged)
    monkeypatch.setattr(sweep_module, "validate_cell", lambda *args: "")
    return calls, failing


# --------------------------------------------------------------------------- the file


def test_each_chained_cell_names_its_upstream_cell_and_runs_after_it(tmp_path):
    sweep = load_sweep(chain_sweep(tmp_path))
    upstream = {cell.id: cell.upstream.id for cell in sweep.study("mrpc").cells}
    assert upstream == {
        "mrpc/d_e=16,seed=0": "pretrain/d_e=16,seed=0",
        "mrpc/d_e=16,seed=1": "pretrain/d_e=16,seed=0",
        "mrpc/d_e=32,seed=0": "pretrain/d_e=32,seed=0",
        "mrpc/d_e=32,seed=1": "pretrain/d_e=32,seed=0",
    }
    assert [cell.study for cell in sweep.run_order(sweep.cells)] == ["pretrain"] * 2 + ["mrpc"] * 4
    cell = sweep.study("mrpc").cells[0]
    assert cell.spec()["pretrained_from"] == {
        "cell": "pretrain/d_e=16,seed=0",
        "checkpoint": "last",
        "key": "model.pretrained",
        "spec_hash": cell.upstream.spec_hash,
    }
    assert "pretrained_from" not in sweep.study("pretrain").cells[0].spec()  # unchained specs are as before
    # before the upstream has run, the command line holds a placeholder, last, after the overrides
    args = cell_args(sweep, cell, tmp_path / "out" / cell.id)
    assert "--model.pretrained=<the last checkpoint of pretrain/d_e=16,seed=0>" in args
    assert args.index("--model.pretrained=<the last checkpoint of pretrain/d_e=16,seed=0>") > args.index(
        "--seed_everything=0"
    )


@pytest.mark.parametrize(
    "chain,needles",
    [
        (
            {"study": "pretrain", "match": ["d_e"], "labels": {"seed": 5}},
            ["study 'mrpc': pretrained_from: 0 cells of study 'pretrain' have d_e=16, seed=5"],
        ),
        (
            {"study": "pretrain", "match": ["seed"]},
            [
                "study 'mrpc': pretrained_from: 2 cells of study 'pretrain' have seed=0",
                "match and labels must pick exactly one",
            ],
        ),
        ({"study": "pretrian"}, ["pretrained_from: study 'pretrian' is not an unchained study of this file: pretrain"]),
        ({"study": "pretrain", "match": ["task"]}, ["match label 'task' is not an axis of study 'mrpc'"]),
        ({"study": "pretrain", "checkpoint": "best"}, ["unknown key 'checkpoint'; valid: study, match, labels"]),
        ({"study": "mrpc"}, ["study 'mrpc' is not an unchained study of this file: pretrain"]),
    ],
)
def test_an_upstream_spec_matching_zero_or_several_cells_is_refused_at_load(tmp_path, chain, needles):
    path = chain_sweep(tmp_path, chain=chain)
    with pytest.raises(UserError) as raised:
        load_sweep(path)
    message = str(raised.value)
    assert f"sweep file {str(path)!r}" in message
    for needle in needles:
        assert needle in message


# --------------------------------------------------------------------------- running


def test_a_cell_whose_upstream_failed_waits_and_runs_on_a_later_run(tmp_path, fake_runs, capsys):
    calls, failing = fake_runs
    path, out = chain_sweep(tmp_path), tmp_path / "out"
    failing.add("pretrain/d_e=16,seed=0")
    assert sweep_main([str(path), "--out", str(out)]) == 1  # the upstream failed; the waiting cells are no failure
    printed = capsys.readouterr().out
    assert "mrpc/d_e=16,seed=1 waits for pretrain/d_e=16,seed=0 (failed)" in printed
    assert "3 finished, 1 failed, 2 waiting, 0 already done" in printed
    assert sorted(calls) == [
        "mrpc/d_e=32,seed=0",
        "mrpc/d_e=32,seed=1",
        "pretrain/d_e=16,seed=0",
        "pretrain/d_e=32,seed=0",
    ]
    waiting = out / "mrpc" / "d_e=16,seed=1"
    assert layout.read_status(waiting)["state"] == "waiting" and not (waiting / layout.LOG_FILE).exists()
    assert sweep_main([str(path), "--out", str(out), "--list"]) == 0
    assert "waiting      mrpc/d_e=16,seed=0  waits for pretrain/d_e=16,seed=0 (failed)" in capsys.readouterr().out

    failing.clear()
    calls.clear()
    assert sweep_main([str(path), "--out", str(out)]) == 0
    assert "3 finished, 0 failed, 0 waiting, 3 already done" in capsys.readouterr().out
    assert list(calls) == ["pretrain/d_e=16,seed=0", "mrpc/d_e=16,seed=0", "mrpc/d_e=16,seed=1"]  # upstream first
    checkpoint = out / "pretrain" / "d_e=16,seed=0" / "checkpoints" / "last.ckpt"
    assert f"--model.pretrained={checkpoint}" in calls["mrpc/d_e=16,seed=1"][0]
    record = layout.read_json(waiting / layout.CELL_FILE)
    assert record["pretrained_from"]["path"] == str(checkpoint)
    assert record["pretrained_from"]["cell"] == "pretrain/d_e=16,seed=0"


def test_a_moved_output_folder_is_the_same_sweep(tmp_path, fake_runs):
    calls, _ = fake_runs
    sweep = load_sweep(chain_sweep(tmp_path))
    run_sweep(sweep, tmp_path / "out", echo=lambda _: None)
    assert len(calls) == 6
    shutil.move(tmp_path / "out", tmp_path / "moved")
    again = run_sweep(load_sweep(chain_sweep(tmp_path)), tmp_path / "moved", echo=lambda _: None)
    assert len(again["skipped"]) == 6 and len(calls) == 6


def test_a_skipped_upstream_study_leaves_its_chained_cells_waiting(tmp_path, fake_runs):
    calls, _ = fake_runs
    sweep = load_sweep(chain_sweep(tmp_path, pretrain={"requires": ["no/such/data"]}), workdir=tmp_path)
    lines: list[str] = []
    outcome = run_sweep(sweep, tmp_path / "out", echo=lines.append)
    assert not calls and len(outcome["waiting"]) == 4
    assert any(
        "mrpc/d_e=32,seed=1 waits for pretrain/d_e=32,seed=0 (study 'pretrain' is skipped: required path "
        "'no/such/data' is absent" in line
        for line in lines
    )


# --------------------------------------------------------------------------- end to end, real runs


def write_mrpc(folder: Path) -> None:
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    rows = [
        f"{n % 2}\t1\t2\tthe man is sleeping .\ta man was {'sleeping' if n % 2 else 'running'} ." for n in range(16)
    ]
    folder.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


@pytest.mark.end_to_end
def test_a_chained_fine_tuning_run_loads_its_upstream_checkpoint(tmp_path, tiny_tokenizer_dir, capsys):
    """Real runs: pretrain seed 0 finishes, seed 1 fails at run time; mrpc seed 0 starts from
    pretrain seed 0's last checkpoint, mrpc seed 1 is never started."""
    text = tmp_path / "text.txt"
    text.write_text("the man is sleeping . a woman was running . the cat sits . people are not running !\n" * 40)
    write_mrpc(tmp_path / "glue" / "MRPC")
    path = write_sweep(
        tmp_path,
        {
            "name": "e2e",
            "wandb": False,
            "studies": {
                "mrpc": {
                    "configs": MRPC_CONFIGS,
                    "pretrained_from": {"study": "pretrain", "match": ["seed"]},
                    "grid": {"seed_everything": [0, 1]},
                    "overrides": {
                        "data.data_dir": str(tmp_path / "glue"),
                        "data.tokenizer": str(tiny_tokenizer_dir),
                        "data.batch_size": 8,
                        "trainer.max_steps": 2,
                        "trainer.max_epochs": 1,
                    },
                },
                "pretrain": {
                    "configs": PRETRAIN_CONFIGS,
                    "grid": {"seed_everything": [0, 1]},
                    "overrides": {
                        "data.train_files": [str(text)],
                        "data.val_files": [str(text)],
                        "data.tokenizer": str(tiny_tokenizer_dir),
                        "data.cache_dir": str(tmp_path / "cache"),
                        "data.block_size": 16,
                        "trainer.max_steps": 2,
                    },
                    # passes validation, fails when the run reads its data
                    "rules": [
                        {"where": {"seed": 1}, "overrides": {"data.train_files": [str(tmp_path / "absent.txt")]}}
                    ],
                },
            },
        },
    )
    out = tmp_path / "out"
    assert sweep_main([str(path), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "mrpc/seed=1 waits for pretrain/seed=1 (failed)" in printed
    assert "2 finished, 1 failed, 1 waiting" in printed

    upstream = layout.read_json(out / "mrpc" / "seed=0" / layout.CELL_FILE)["pretrained_from"]
    checkpoint = Path(upstream["path"])
    assert upstream["cell"] == "pretrain/seed=0" and checkpoint.name == "last.ckpt"
    assert checkpoint.is_relative_to(out / "pretrain" / "seed=0") and checkpoint.is_file()
    [saved_config] = (out / "mrpc" / "seed=0").rglob("config.yaml")  # the configuration the run saved
    saved = yaml.safe_load(saved_config.read_text())
    assert saved["model"]["init_args"]["pretrained"] == str(checkpoint)
    [fine_tuned] = (out / "mrpc" / "seed=0").rglob("last.ckpt")
    hparams = torch.load(fine_tuned, map_location="cpu", weights_only=True)["hyper_parameters"]
    # GlueModule got the path and took its width from it (mrpc.yaml leaves it to the source)
    assert hparams["pretrained"] == str(checkpoint) and hparams["hidden_size"] == 64

    assert layout.read_status(out / "mrpc" / "seed=1")["state"] == "waiting"
    assert not (out / "mrpc" / "seed=1" / layout.LOG_FILE).exists()  # never started
