"""Sweep files, validation before any run, skipping finished cells, and the cluster outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sweep_files import tiny_sweep, write_sweep

from tiedemb.errors import UserError
from tiedemb.experiments import cells as sweep_module
from tiedemb.experiments import layout
from tiedemb.experiments.cells import cell_args, pending_cells, run_sweep, validate_cell
from tiedemb.experiments.sweep_file import load_sweep
from tiedemb.sweep import main as sweep_main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


# --------------------------------------------------------------------------- the file


def test_grid_expands_to_labelled_cells_in_order(tmp_path):
    sweep = load_sweep(tiny_sweep(tmp_path))
    assert [cell.id for cell in sweep.cells] == [
        "t/variant=tied,seed=0",
        "t/variant=tied,seed=1",
        "t/variant=untied,seed=0",
        "t/variant=untied,seed=1",
    ]
    cell = sweep.cells[2]
    assert cell.overrides == {"trainer.max_steps": 2, "model.head": "untied", "seed_everything": 0}
    assert [cell.index for cell in sweep.cells] == [0, 1, 2, 3]


def test_named_axes_rules_and_studies(tmp_path):
    path = write_sweep(
        tmp_path,
        {
            "name": "s",
            "configs": [str(CONFIGS / "tied.yaml")],
            "studies": {
                "a": {
                    "grid": {
                        "variant": {
                            "t5": {"configs": [str(CONFIGS / "tied_t5.yaml")]},
                            "mup": {"overrides": {"model.output_scale": "mup:64"}},
                        },
                        "model.embedding_dim": [128, 256],
                    },
                    "rules": [
                        {"where": {"variant": "mup", "d_e": 128}, "skip": True},
                        {"where": {"d_e": [256]}, "overrides": {"trainer.max_steps": 7}},
                    ],
                },
                "b": {"requires": ["no/such/folder"], "grid": {"seed_everything": [0]}},
            },
        },
    )
    sweep = load_sweep(path, workdir=tmp_path)
    ids = [cell.id for cell in sweep.cells]
    assert ids == ["a/variant=t5,d_e=128", "a/variant=t5,d_e=256", "a/variant=mup,d_e=256"]
    t5 = sweep.cells[1]
    assert t5.configs[-1].name == "tied_t5.yaml" and t5.overrides["trainer.max_steps"] == 7
    skipped = sweep.studies[1]
    assert "no/such/folder" in skipped.skipped_because and len(sweep.all_cells) == 4
    assert sweep.all_cells[-1].index == 3


@pytest.mark.parametrize(
    "content,needle",
    [
        ({"name": "x", "gird": {}}, "unknown key 'gird'; valid: name,"),
        ({"studies": {"a": {"grid": {"model.head": []}}}}, "study 'a': grid.model.head: expected a non-empty list"),
        ({"studies": {"a": {"configs": ["missing.yaml"]}}}, "config 'missing.yaml' does not exist"),
        ({"grid": {"seed_everything": [0]}, "rules": [{"where": {"colour": 1}}]}, "unknown axis label 'colour'"),
        ({"test": "sometimes"}, "test='sometimes' is not a known choice"),
    ],
)
def test_sweep_file_mistakes_name_the_place_and_key(tmp_path, content, needle):
    with pytest.raises(UserError, match=None) as raised:
        load_sweep(write_sweep(tmp_path, content))
    assert needle in str(raised.value)


@pytest.mark.end_to_end
def test_an_override_the_cli_rejects_fails_naming_cell_and_key(tmp_path):
    path = tiny_sweep(
        tmp_path, rules=[{"where": {"variant": "untied", "seed": 1}, "overrides": {"model.colour": "red"}}]
    )
    sweep = load_sweep(path)
    validate_cell(sweep, sweep.cells[0], tmp_path / "out")  # the others are fine
    with pytest.raises(UserError) as raised:
        run_sweep(sweep, tmp_path / "out", echo=lambda _: None)
    message = str(raised.value)
    assert "t/variant=untied,seed=1" in message and "colour" in message
    assert not (tmp_path / "out" / "t").exists()  # nothing ran


@pytest.mark.end_to_end
def test_the_sweep_command_reports_a_rejected_key_in_the_clis_words_alone(tmp_path):
    """As a user runs it: the sweep's own arguments once made Lightning warn inside the check, and that
    warning (with both argument lists) ended up in the message ahead of the reason."""
    path = tiny_sweep(tmp_path, grid={"model.hidden_sizee": [32]})
    result = subprocess.run(
        [sys.executable, "-m", "tiedemb.sweep", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: sweep 't', cell 't/hidden_sizee=32': the command line is rejected: --model "
        "'tiedemb.PretrainModule': Option 'hidden_sizee' is not accepted; did you mean hidden_size?"
    ], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "t").exists()


# --------------------------------------------------------------------------- running and rerunning


def test_a_rerun_of_a_finished_sweep_starts_no_run(tmp_path, fake_runs):
    calls, _ = fake_runs
    sweep = load_sweep(tiny_sweep(tmp_path))
    out = tmp_path / "out"
    first = run_sweep(sweep, out, echo=lambda _: None)
    assert len(first["finished"]) == 4 and len(calls) == 4
    for cell in sweep.cells:
        status = layout.read_status(out / cell.id)
        assert status["state"] == "finished" and status["attempt"] == 1
        assert layout.read_json(out / cell.id / layout.CELL_FILE)["labels"] == cell.labels
    assert layout.read_json(out / layout.MANIFEST_FILE)["name"] == "t"
    second = run_sweep(load_sweep(tiny_sweep(tmp_path)), out, echo=lambda _: None)
    assert len(calls) == 4 and second["finished"] == [] and len(second["skipped"]) == 4


def test_a_rerun_after_failures_runs_only_the_unfinished_cells(tmp_path, fake_runs):
    calls, failing = fake_runs
    sweep = load_sweep(tiny_sweep(tmp_path))
    out = tmp_path / "out"
    failing.add("variant=untied,seed=0")
    outcome = run_sweep(sweep, out, echo=lambda _: None)
    assert outcome["failed"] == ["t/variant=untied,seed=0"] and len(outcome["finished"]) == 3
    status = layout.read_status(out / "t" / "variant=untied,seed=0")
    assert status["state"] == "failed" and status["message"] == "error: boom"
    # a crash mid-cell leaves "running": treated as unfinished too
    layout.write_json(out / "t" / "variant=tied,seed=1" / layout.STATUS_FILE, {"state": "running", "attempt": 1})
    failing.clear()
    calls.clear()
    outcome = run_sweep(sweep, out, echo=lambda _: None)
    assert sorted(outcome["finished"]) == ["t/variant=tied,seed=1", "t/variant=untied,seed=0"] and len(calls) == 2
    assert layout.read_status(out / "t" / "variant=untied,seed=0")["attempt"] == 2


def test_a_preempted_cell_is_not_finished_and_resumes_on_the_rerun(tmp_path, fake_runs, monkeypatch):
    """A fit stopped by SIGTERM exits 143 (tiedemb.cli.main): the cell stays unfinished, says so,
    and the next run of the sweep resumes it from its last checkpoint."""
    calls, _ = fake_runs
    sweep = load_sweep(tiny_sweep(tmp_path))
    out = tmp_path / "out"
    fake = sweep_module._run_logged

    def preempted(command, log_file, workdir, heading, threads=None):
        fake(command, log_file, workdir, heading)
        checkpoints = Path(log_file).parent / "checkpoints"
        checkpoints.mkdir(exist_ok=True)
        (checkpoints / "last.ckpt").write_bytes(b"")
        return 143

    monkeypatch.setattr(sweep_module, "_run_logged", preempted)
    outcome = run_sweep(sweep, out, [sweep.cells[0]], echo=lambda _: None)
    assert outcome["failed"] == [sweep.cells[0].id]
    status = layout.read_status(out / sweep.cells[0].id)
    assert status["state"] == "failed" and status["message"].startswith("preempted (SIGTERM) in fit")
    monkeypatch.setattr(sweep_module, "_run_logged", fake)
    calls.clear()
    outcome = run_sweep(sweep, out, [sweep.cells[0]], echo=lambda _: None)
    assert outcome["finished"] == [sweep.cells[0].id]
    status = layout.read_status(out / sweep.cells[0].id)
    assert status["attempt"] == 2 and status["resumed"] is True
    assert "--ckpt_path=last" in calls[0]


def test_finished_cells_with_other_settings_are_refused(tmp_path, fake_runs):
    out = tmp_path / "out"
    run_sweep(load_sweep(tiny_sweep(tmp_path)), out, echo=lambda _: None)
    changed = load_sweep(tiny_sweep(tmp_path, overrides={"trainer.max_steps": 3}))
    with pytest.raises(UserError, match="other settings"):
        pending_cells(changed.cells, out)


def test_cells_own_their_folders_and_loggers(tmp_path):
    sweep = load_sweep(tiny_sweep(tmp_path))
    folder = tmp_path / "out" / sweep.cells[0].id
    args = cell_args(sweep, sweep.cells[0], folder)
    assert args[0] == "fit" and f"--trainer.default_root_dir={folder}" in args
    logger = next(arg for arg in args if arg.startswith("--trainer.logger="))
    assert '"group": "t"' in logger and '"variant=tied"' in logger and '"seed=0"' in logger
    assert f'"save_dir": "{folder}"' in logger and "CSVLogger" in logger


def test_entry_point_selects_cells_by_index_and_lists_states(tmp_path, fake_runs, capsys):
    calls, _ = fake_runs
    path = tiny_sweep(tmp_path)
    out = tmp_path / "out"
    assert sweep_main([str(path), "--out", str(out), "--cell", "3"]) == 0
    assert len(calls) == 1 and (out / "t" / "variant=untied,seed=1" / layout.STATUS_FILE).is_file()
    assert sweep_main([str(path), "--out", str(out), "--cell", "0"]) == 0 and len(calls) == 2
    capsys.readouterr()
    assert sweep_main([str(path), "--out", str(out), "--list"]) == 0
    listing = capsys.readouterr().out
    assert "finished     t/variant=tied,seed=0" in listing and "not started  t/variant=tied,seed=1" in listing
    assert sweep_main([str(path), "--out", str(out), "--cell", "9"]) == 2
    assert "cells 0..3" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("mine")
    assert sweep_main([str(path), "--out", str(tmp_path / "notes.txt")]) == 2
    assert f"error: --out '{tmp_path / 'notes.txt'}' is a file; pass a folder" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine" and len(calls) == 2


def stage(command: list[str]) -> str:
    """The subcommand a cell's command runs (``... -m tiedemb fit ...``)."""
    return next(word for word in command if word in ("fit", "test"))


def test_a_failed_test_stage_reruns_alone(tmp_path, fake_runs, monkeypatch):
    calls, _ = fake_runs
    monkeypatch.setattr(sweep_module, "_checkpoint", lambda folder, which: folder / "best.ckpt")
    sweep = load_sweep(tiny_sweep(tmp_path, test="best", grid={"seed_everything": [0]}))
    out = tmp_path / "out"
    real = sweep_module._run_logged
    monkeypatch.setattr(
        sweep_module, "_run_logged", lambda command, *rest: 1 if stage(command) == "test" else real(command, *rest)
    )
    assert run_sweep(sweep, out, echo=lambda _: None)["failed"] == ["t/seed=0"]
    assert [stage(command) for command in calls] == ["fit"]
    monkeypatch.setattr(sweep_module, "_run_logged", real)
    assert run_sweep(sweep, out, echo=lambda _: None)["finished"] == ["t/seed=0"]
    assert [stage(command) for command in calls] == ["fit", "test"]  # fit was not run again
    assert f"--ckpt_path={out / 't' / 'seed=0' / 'best.ckpt'}" in calls[-1]


def test_the_test_stage_and_a_chained_cell_take_the_run_folders_best_or_last_checkpoint(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "last.ckpt").write_bytes(b"last")
    assert sweep_module._checkpoint(tmp_path, "best") == checkpoints / "last.ckpt"  # no validation scored one yet
    (checkpoints / "best.ckpt").write_bytes(b"best")
    assert sweep_module._checkpoint(tmp_path, "best") == checkpoints / "best.ckpt"
    assert sweep_module._checkpoint(tmp_path, "last") == checkpoints / "last.ckpt"
    (checkpoints / "last.ckpt").unlink()
    with pytest.raises(UserError, match="has no last.ckpt"):
        sweep_module._checkpoint(tmp_path, "last")


def test_without_out_the_cells_go_to_runs_and_the_sweeps_name(tmp_path, fake_runs, monkeypatch):
    calls, _ = fake_runs
    sweep_file = tiny_sweep(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert sweep_main([str(sweep_file), "--cell", "0"]) == 0
    (cell,) = [cell for cell in load_sweep(sweep_file).cells if cell.index == 0]
    assert len(calls) == 1
    assert layout.read_status(tmp_path / "runs" / "t" / cell.id)["state"] == "finished"


def test_a_cell_is_validated_by_the_clis_parser_alone_nothing_run_or_built(tmp_path, monkeypatch):
    import tiedemb.cli

    monkeypatch.setattr(tiedemb.cli, "main", lambda *args, **kwargs: pytest.fail("ran the CLI"))
    monkeypatch.setattr(tiedemb.cli.TiedembCLI, "instantiate_classes", lambda self: pytest.fail("built the classes"))
    sweep = load_sweep(tiny_sweep(tmp_path))
    config = validate_cell(sweep, sweep.cells[2], tmp_path / "out")  # variant=untied,seed=0
    assert config["model"]["init_args"]["head"] == "untied" and config["trainer"]["max_steps"] == 2
    assert not (tmp_path / "out").exists()
