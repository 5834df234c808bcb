"""Every shipped sweep file loads, and the first cell of each of its studies is a command line the
real CLI accepts (the check ``python -m tiedemb.sweep`` makes before its first cell runs).

The studies' ``requires`` are looked up in a folder whose ``data/`` holds made-up stand-ins for what
``tiedemb data prepare`` writes (tests/stand_in_data.py), so every study that needs only those is
validated; a study that needs a model placed by hand is skipped by the sweep itself, as in a clone.
A renamed option or config breaks this test rather than a three-hour run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tiedemb.experiments.cells import cell_dir, validate_cell
from tiedemb.experiments.sweep_file import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))


def test_the_shipped_sweeps_are_found():
    assert {"repro_tied_cpu", "repro_width_cpu", "smoke"} <= {path.stem for path in SWEEPS}


@pytest.fixture(scope="module")
def prepared(stand_in_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder whose data/ holds the prepared data's layout (made-up files)."""
    folder = tmp_path_factory.mktemp("prepared")
    (folder / "data").mkdir()
    for name in ("text", "glue", "tokenizers"):
        (folder / "data" / name).symlink_to(stand_in_data / name)
    return folder


@pytest.mark.parametrize("path", SWEEPS, ids=lambda path: path.stem)
def test_each_study_of_a_shipped_sweep_validates(path, tmp_path, prepared):
    sweep = load_sweep(path, workdir=prepared)
    skipped = {study.name: study.skipped_because for study in sweep.studies if study.skipped_because}
    assert all("data/models/" in reason for reason in skipped.values()), skipped
    assert sweep.all_cells, f"{path.name} has no cells"
    runnable = [study for study in sweep.studies if not study.skipped_because]
    for study in runnable:
        cell = study.cells[0]
        resolved = validate_cell(sweep, cell, cell_dir(tmp_path, cell))
        assert resolved["model"]["class_path"] and "max_steps" in resolved["trainer"], (study.name, resolved)
