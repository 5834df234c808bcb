"""Using a trained run: ``tiedemb predict`` on a GLUE run, and
``fit --save_transformers``.

Two tiny runs, each made once: tied.yaml (next-token) on made-up text with the tokenizer it trains, and
MRPC from scratch on a made-up MRPC folder with the tiny tokenizer. Both commands are run through the
``tiedemb`` command (``tiedemb.command.main``) from another folder than the run's.
"""

from __future__ import annotations

import contextlib
import csv
import io
import random
from pathlib import Path

import pytest
from bert_helpers import write_mrpc
from tiny_runs import TINY_TIED

from tiedemb.cli import main as cli_main
from tiedemb.command import main as tiedemb
from tiedemb.command import predicts_from_a_run

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
WORDS = "the a cat dog man woman sat ran saw big small red on under near house park and with .".split()
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def fit_quietly(folder: Path, args: list[str]) -> str:
    """``fit`` in ``folder`` with W&B off; what it said on stderr."""
    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(said):
        patch.chdir(folder)
        patch.setenv("WANDB_MODE", "disabled")
        cli_main(["fit", *args, *QUIET])
    return said.getvalue()


@pytest.fixture(scope="module")
def clm_run(tmp_path_factory) -> tuple[Path, str]:
    """A 2-step next-token run on made-up text, with --save_transformers: its folder and its stderr."""
    root = tmp_path_factory.mktemp("clm_run")
    rng = random.Random(0)
    (root / "text.txt").write_text(
        "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(300))
    )
    said = fit_quietly(
        root,
        [
            *TINY_TIED,
            "--data.train_files=[text.txt]",
            "--data.vocab_size=300",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--trainer.limit_val_batches=1",
            "--run_name=clm",
            "--save_transformers=true",
        ],
    )
    return root / "runs" / "clm", said


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory, tiny_tokenizer_dir) -> Path:
    """A 2-step MRPC run from scratch on a made-up MRPC folder: its folder."""
    root = tmp_path_factory.mktemp("mrpc_run")
    write_mrpc(root / "glue")
    fit_quietly(
        root,
        [
            "--config",
            str(CONFIGS / "glue" / "mrpc.yaml"),
            "--data.data_dir=glue",
            f"--data.tokenizer={tiny_tokenizer_dir}",
            "--model.pretrained=null",
            "--model.hidden_size=32",
            "--model.num_layers=1",
            "--model.num_heads=2",
            "--model.intermediate_size=64",
            "--data.max_length=32",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=1",
            "--run_name=mrpc",
        ],
    )
    return root / "runs" / "mrpc"


def run_tiedemb(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    status = tiedemb(args)
    out, err = capsys.readouterr()
    return status, out, err


# --------------------------------------------------------------------------- the end of a fit


@pytest.mark.end_to_end
def test_save_transformers_writes_a_folder_transformers_loads_beside_the_checkpoints(clm_run):
    from transformers import AutoModelForCausalLM

    folder, said = clm_run
    assert f"wrote {Path('runs/clm/transformers')} (" in said
    model = AutoModelForCausalLM.from_pretrained(str(folder / "transformers"))
    assert model.config.vocab_size == 300 and (folder / "transformers" / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    "settings, named",
    [
        (["--model.head=tied_orth", "--model.head_norm=true"], "model.head_norm=true"),
        (["--model.objective=mlm"], "is a masked-LM model; only next-token models (model.objective=clm) export"),
    ],
    ids=["head-norm", "masked-lm"],
)
def test_save_transformers_is_refused_before_training_for_a_model_no_class_holds(settings, named, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited, pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        cli_main(["fit", *TINY_TIED, *settings, "--save_transformers=true", *QUIET])
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: --save_transformers: ") and named in last
    assert not (tmp_path / "runs").exists()


def test_save_transformers_outside_fit_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited, pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        cli_main(["validate", *TINY_TIED, "--save_transformers=true", *QUIET])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: --save_transformers saves what a fit trained; validate trains nothing"
    )


# --------------------------------------------------------------------------- predict


def test_predict_with_a_run_or_input_goes_to_the_run_command_else_to_the_lightning_cli():
    assert predicts_from_a_run(["predict", "runs/mrpc", "--input", "pairs.tsv"])
    assert predicts_from_a_run(["predict", "--input=pairs.tsv", "runs/mrpc"])
    assert not predicts_from_a_run(["predict", "--config", "configs/glue/mrpc.yaml", "--ckpt_path", "a.ckpt"])
    assert not predicts_from_a_run(["predict", "--help"])


@pytest.mark.end_to_end
def test_predict_writes_one_label_per_input_row_and_the_submission_file(mrpc_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("pairs.tsv").write_text("the man sat\tthe man sat\na big dog\tthe red house\nthe cat\tthe cat\n")
    args = ["predict", str(mrpc_run), "--input", "pairs.tsv", "--submission", "glue_out"]
    status, out, err = run_tiedemb(args, capsys)
    assert status == 0, err
    assert out.splitlines() == ["wrote predictions.tsv", f"wrote {Path('glue_out/MRPC.tsv')}"]
    with open("predictions.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [row["index"] for row in rows] == ["0", "1", "2"]
    assert {row["label"] for row in rows} <= {"not_equivalent", "equivalent"}
    for row in rows:
        assert float(row["p_not_equivalent"]) + float(row["p_equivalent"]) == pytest.approx(1, abs=1e-5)
        assert row["label"] == max(("not_equivalent", "equivalent"), key=lambda name: float(row[f"p_{name}"]))
    submission = Path("glue_out/MRPC.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 4
    assert all(line.split("\t")[1] in ("0", "1") for line in submission[1:])
    # run again: never over the first file
    assert run_tiedemb(args, capsys)[1].splitlines()[0] == "wrote predictions-1.tsv"


@pytest.mark.end_to_end
def test_predict_reads_a_glue_file_by_its_header(mrpc_run, tmp_path, capsys):
    dev = mrpc_run.parents[1] / "glue" / "MRPC" / "dev.tsv"
    status, _, err = run_tiedemb(
        ["predict", str(mrpc_run), "--input", str(dev), "--output", str(tmp_path / "p.tsv")], capsys
    )
    assert status == 0, err
    assert len((tmp_path / "p.tsv").read_text().splitlines()) == len(dev.read_text().splitlines())  # header for header


@pytest.mark.end_to_end
def test_predict_refuses_a_next_token_run_a_missing_file_and_wrong_rows_writing_nothing(
    clm_run, mrpc_run, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    Path("pairs.tsv").write_text("one sentence only\n")
    cases = [
        (
            [str(clm_run[0]), "--input", "pairs.tsv"],
            f"error: {str(clm_run[0])!r} is a next-token pretraining run, not a GLUE classifier; "
            "`tiedemb export` makes it a transformers causal LM, whose generate() continues text",
        ),
        ([str(mrpc_run), "--input", "missing.tsv"], "error: --input 'missing.tsv' does not exist; pass a .tsv file"),
        (
            [str(mrpc_run), "--input", "pairs.tsv"],
            "error: --input 'pairs.tsv' line 1 has 1 tab-separated fields; mrpc takes 2 per row (its sentences), "
            "or a header naming #1 String and #2 String",
        ),
    ]
    for args, line in cases:
        status, out, err = run_tiedemb(["predict", *args], capsys)
        assert (status, out, err.strip().splitlines()) == (2, "", [line])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pairs.tsv"]
