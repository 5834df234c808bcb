"""The shipped configs: package data of the wheel, read where a --config path names one that is not here."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tiedemb.training.shipped_configs import resolve_config, resolve_config_args, shipped_configs

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working folder with no configs in it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_checkout_ships_its_own_configs_folder():
    assert shipped_configs() == CONFIGS


@pytest.mark.parametrize(
    "given, shipped",
    [
        ("configs/tied_orth.yaml", "tied_orth.yaml"),
        ("tied_orth.yaml", "tied_orth.yaml"),
        ("./configs/scale/tiny.yaml", "scale/tiny.yaml"),
        ("scale/tiny.yaml", "scale/tiny.yaml"),
        ("configs/sweeps/smoke.yaml", "sweeps/smoke.yaml"),
    ],
)
def test_a_path_not_here_naming_a_shipped_config_is_the_shipped_copy_said_at_info_level(
    elsewhere, caplog, given, shipped
):
    with caplog.at_level(logging.INFO, logger="tiedemb"):
        assert resolve_config(given) == str(CONFIGS / shipped)
    assert f"{given} is not here: using the shipped {CONFIGS / shipped}" in caplog.text


def test_a_local_file_of_that_name_wins(elsewhere):
    (elsewhere / "configs").mkdir()
    (elsewhere / "configs" / "tied_orth.yaml").write_text("model: {}\n")
    assert resolve_config("configs/tied_orth.yaml") == "configs/tied_orth.yaml"
    (elsewhere / "folder").mkdir()
    (elsewhere / "folder" / "tied.yaml").write_text("model: {}\n")
    assert resolve_config("tied.yaml", relative_to=elsewhere / "folder") == "tied.yaml"


@pytest.mark.parametrize("given", ["configs/none_such.yaml", "../configs/tied.yaml", "/nowhere/tied.yaml", "configs"])
def test_a_path_naming_no_shipped_config_is_left_for_the_parser_to_refuse(elsewhere, given):
    assert resolve_config(given) == given


def test_every_config_option_spelling_on_a_command_line_is_resolved(elsewhere):
    given = ["fit", "--config", "tied.yaml", "-c", "scale/tiny.yaml", "--config=configs/untied.yaml", "--x=tied.yaml"]
    assert resolve_config_args(given) == [
        "fit",
        "--config",
        str(CONFIGS / "tied.yaml"),
        "-c",
        str(CONFIGS / "scale/tiny.yaml"),
        f"--config={CONFIGS / 'untied.yaml'}",
        "--x=tied.yaml",
    ]


@pytest.mark.end_to_end
def test_fit_from_another_folder_reads_the_shipped_variant_its_recipe_and_an_overlay(elsewhere):
    from tiedemb.cli import main

    cli = main(
        [
            "--config",
            "configs/tied_orth.yaml",  # names base/study.yaml, relative to itself
            "--config",
            "configs/scale/tiny.yaml",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={elsewhere / 'runs'}",
        ],
        run=False,
    )
    study = (CONFIGS / "base" / "study.yaml").read_text()
    assert cli.model.hparams.head == "tied_orth"
    assert cli.model.hparams.hidden_size == 64  # the overlay
    assert "objective: clm" in study and cli.model.hparams.objective == "clm"  # the recipe


def test_a_sweep_file_and_the_configs_its_cells_name_resolve_to_shipped_ones(elsewhere):
    from tiedemb.experiments.sweep_file import load_sweep
    from tiedemb.sweep import sweep_file

    shipped = load_sweep(sweep_file("configs/sweeps/smoke.yaml"))
    assert shipped.cells[0].configs == (CONFIGS / "tied.yaml", CONFIGS / "scale" / "tiny.yaml")
    # A user's own sweep file naming shipped configs it does not have beside it.
    (elsewhere / "mine.yaml").write_text(
        "name: mine\nconfigs: [configs/tied.yaml, scale/tiny.yaml]\ngrid:\n  model.head: [untied]\n"
    )
    (cell,) = load_sweep(elsewhere / "mine.yaml").cells
    assert cell.configs == (CONFIGS / "tied.yaml", CONFIGS / "scale" / "tiny.yaml")


def test_the_wheel_lists_every_package_and_maps_configs_into_it():
    """pyproject lists the packages (package-dir maps one of them to configs/); a package added
    under tiedemb/ but not to the list would be missing from the wheel."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "tiedemb").glob("**/__init__.py")}
    assert set(setuptools["packages"]) == found | {"tiedemb.configs"}
    assert setuptools["package-dir"] == {"tiedemb.configs": "configs"}
    assert setuptools["package-data"] == {"tiedemb.configs": ["**/*.yaml"]}


def test_no_shipped_config_reads_data_from_beside_the_repository():
    """A clone has no ../shared: the configs and sweeps read data/..., which tiedemb data prepare makes."""
    naming = [path.relative_to(ROOT).as_posix() for path in CONFIGS.rglob("*.yaml") if "../shared" in path.read_text()]
    assert naming == []


def strings(value):
    """Every string of a loaded YAML document, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


MADE_BY_A_RUN = {"data/tokenizers/brown-wordpiece-8192"}
"""Paths a study makes from one of its runs (python -m tiedemb.data.tokenizers), not data prepare."""


def test_every_data_path_a_shipped_config_names_is_one_data_prepare_makes():
    """So a missing one is reported with the command that makes it (tiedemb.data.preparing.prepare_hint)."""
    import yaml

    from tiedemb.data.preparing import entry_for

    named = {
        text
        for path in CONFIGS.rglob("*.yaml")
        for text in strings(yaml.safe_load(path.read_text()))
        if text.startswith("data/")
        and not text.startswith("data/models/")  # a model placed by hand
        and text not in MADE_BY_A_RUN
    }
    assert {"data/text/brown.txt", "data/glue", "data/tokenizers/bert-base-uncased"} <= named
    # data/glue is a GLUE data_dir: the task's folder in it (data/glue/MRPC) is what is looked up
    assert [path for path in sorted(named - {"data/glue"}) if entry_for(path) is None] == []
    assert entry_for("data/glue/MNLI") == "mnli"
