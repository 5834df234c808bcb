"""Every command README.md shows runs as written, then docs/experiments.md's after its opening
(the rest of docs/*.md: ``test_docs_pages_commands.py``).

How a command is found, shrunk and run, and what may differ from the page: ``documented_commands``.
The first tests here check that machinery itself.
"""

from __future__ import annotations

from pathlib import Path

import documented_commands
import pytest
from documented_commands import (
    COMMANDS,
    README_COMMANDS_TODAY,
    DocCommand,
    Workspace,
    check_command,
    extract,
    params,
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("readme"))


def test_the_extractor_reads_continuations_chains_loops_and_comments():
    markdown = "\n".join(
        [
            "```bash",
            "python3 -m venv .venv && . .venv/bin/activate && python main.py fit --config a.yaml  # note",
            "# a comment line",
            "for h in one two; do",
            "  python main.py validate --config configs/$h.yaml \\",
            "    --trainer.limit_val_batches=4",
            "done",
            "python -m pytest -q",
            "python -m tiedemb.report runs/x   # report",
            "```",
            "```python",
            "import main.py",
            "```",
        ]
    )
    found = extract(markdown, "x.md")
    assert [(c.line, list(c.argv), c.binding) for c in found] == [
        (2, ["python", "main.py", "fit", "--config", "a.yaml"], ""),
        (
            5,
            ["python", "main.py", "validate", "--config", "configs/one.yaml", "--trainer.limit_val_batches=4"],
            "h=one",
        ),
        (
            5,
            ["python", "main.py", "validate", "--config", "configs/two.yaml", "--trainer.limit_val_batches=4"],
            "h=two",
        ),
        (9, ["python", "-m", "tiedemb.report", "runs/x"], ""),
    ]


def test_readme_commands_are_all_found():
    readme = [c for c in COMMANDS if c.doc == "README.md"]
    assert len(readme) >= README_COMMANDS_TODAY, [c.text for c in readme]
    assert len({c.id for c in COMMANDS}) == len(COMMANDS), "command ids must be unique"


def test_placeholders_become_patterns():
    assert Workspace.placeholder_pattern("runs/.../best.ckpt") == "runs/**/*.ckpt"
    assert (
        Workspace.placeholder_pattern("runs/smoke/mrpc/d_e=64,seed=0/x/<id>/last.ckpt")
        == "runs/smoke/mrpc/d_e=64,seed=0/x/*/last.ckpt"
    )
    assert Workspace.placeholder_pattern("configs/tied.yaml") is None


def test_a_command_waits_for_earlier_ones_only_while_what_it_reads_is_missing(tmp_path):
    """A test selected alone runs the commands documented before it; in a full run nothing extra runs."""
    space = Workspace(tmp_path)
    export = DocCommand("x.md", 3, ("python", "-m", "tiedemb.export", "runs/.../last.ckpt", "exported"))
    report = DocCommand("x.md", 2, ("python", "-m", "tiedemb.report", "runs/smoke"))
    sweep = DocCommand("x.md", 1, ("python", "-m", "tiedemb.sweep", "configs/sweeps/smoke.yaml", "--out", "runs/smoke"))
    assert space.placeholders_unfilled(export) and space.placeholders_unfilled(report)
    assert not space.placeholders_unfilled(sweep)
    (space.repo / "runs" / "smoke" / "cell" / "checkpoints").mkdir(parents=True)
    (space.repo / "runs" / "smoke" / "cell" / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert not space.placeholders_unfilled(export) and not space.placeholders_unfilled(report)
    # a placeholder an earlier command also shows is filled by what it matches, not by its literal path
    again = DocCommand("x.md", 4, ("python", "-m", "tiedemb.export", "runs/.../last.ckpt", "again"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(documented_commands, "COMMANDS", [sweep, report, export, again])
        assert not space.placeholders_unfilled(again)
    assert space.fill_placeholder("runs/.../last.ckpt") == "runs/smoke/cell/checkpoints/last.ckpt"
    with pytest.raises(AssertionError, match="matched no file"):
        space.fill_placeholder("runs/.../best.ckpt")  # last.ckpt is not a monitored best


def test_without_the_real_data_the_workspace_data_folder_holds_made_up_files_in_its_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(documented_commands, "SHARED", tmp_path / "no-shared")
    space = Workspace(tmp_path / "work")
    data = space.repo / "data"
    assert data.is_dir() and not data.is_symlink()  # runs write their caches into it, not into the data's source
    for path in ("text/brown.txt", "text/wikitext-2-valid.txt", "glue/MRPC/train.tsv", "tokenizers/bert-base-uncased"):
        assert (data / path).exists(), path


def test_a_scratch_sweep_keeps_one_seed_and_the_ends_of_each_studys_first_axis(tmp_path):
    """The scratch copies of the shipped sweeps: fewer cells, the chains and the cells the docs name intact."""
    from tiedemb.experiments.sweep_file import load_sweep

    space = Workspace(tmp_path)
    cells = {}
    for name in ("smoke", "repro_width_cpu"):
        relative = Path("configs/sweeps") / f"{name}.yaml"
        space.shrink_sweep_file(relative)
        sweep = load_sweep(space.repo / relative, workdir=space.repo)
        cells[name] = sorted(cell.id for study in sweep.studies for cell in study.cells)
    # smoke's pretraining study compares both heads at its first width; MRPC keeps both widths
    assert cells["smoke"] == [
        "mrpc/d_e=32,seed=0",
        "mrpc/d_e=64,seed=0",
        "tied/variant=tied,d_e=32,seed=0",
        "tied/variant=untied,d_e=32,seed=0",
    ]
    # every route keeps the narrowest and the widest d_e, so the chained route finds both upstream cells
    assert cells["repro_width_cpu"] == sorted(
        [f"pretrain/d_e={d_e},output=tied,seed=0" for d_e in (32, 128)]
        + [f"mrpc/d_e={d_e},seed=0" for d_e in (32, 128)]
        + [f"similarity/d_e={d_e},narrowing=balanced" for d_e in (32, 384)]
        + [f"svd/d_e={d_e},seed=0" for d_e in (64, 384)]
    )


@pytest.mark.parametrize("command", params("readme"))
def test_readme_command_runs(command: DocCommand, workspace: Workspace) -> None:
    check_command(command, workspace)
