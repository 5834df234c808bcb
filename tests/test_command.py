"""The ``tiedemb`` command: its subcommands, and a normal (non-editable) install running outside the repository."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tiedemb import __version__
from tiedemb.command import COMMANDS

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, **options) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600, **options)


def test_every_subcommand_names_a_module_with_a_main():
    for name, (module, _) in COMMANDS.items():
        assert importlib.util.find_spec(module) is not None, f"{name}: no module {module}"


def test_the_command_hands_to_lightningcli_exactly_its_subcommands():
    from tiedemb.cli import TiedembCLI
    from tiedemb.command import LIGHTNING_SUBCOMMANDS

    assert LIGHTNING_SUBCOMMANDS == set(TiedembCLI.subcommands())


def test_help_gives_each_subcommand_one_line():
    from tiedemb.command import usage

    listed = usage().split("subcommands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == list(COMMANDS)
    assert all(line.startswith("  ") and len(line.split()) > 2 for line in listed)  # a name and its summary


@pytest.mark.end_to_end
def test_help_lists_every_subcommand_and_a_wrong_one_is_refused_in_one_line():
    shown = run(sys.executable, "-m", "tiedemb", "--help")
    assert shown.returncode == 0
    assert __version__ in shown.stdout
    for name in COMMANDS:
        assert f"\n  {name} " in shown.stdout
    wrong = run(sys.executable, "-m", "tiedemb", "fitt")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == ["error: unknown subcommand 'fitt'; one of: " + ", ".join(COMMANDS)]


@pytest.mark.end_to_end
def test_the_command_line_reaches_lightningcli_as_its_own(monkeypatch, recwarn, capsys):
    """``tiedemb fit ...`` lets LightningCLI read sys.argv itself: handing it a copy as ``args``
    beside a command line draws Lightning's "args parameter is intended to run from within Python"."""
    from tiedemb.command import main

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["tiedemb", "fit", "--config", "configs/tied_orth.yaml", "--print_config"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 0
    assert "head: tied_orth" in capsys.readouterr().out
    assert not [warning for warning in recwarn if "args parameter" in str(warning.message)]


@pytest.mark.end_to_end
def test_a_wheel_install_runs_fit_and_a_shipped_sweep_from_a_folder_outside_the_repository(tmp_path):
    """The built wheel in a fresh virtual environment (its dependencies borrowed from this one's
    site-packages, so nothing is downloaded), used from an empty folder: the configs are the wheel's."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.fail("building the wheel needs setuptools in the test environment")
    source = tmp_path / "source"  # what the wheel is built from, so the build writes nothing into the repository
    for name in ("tiedemb", "configs"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    built = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(dist.glob("tiedemb-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        packed = {name for name in archive.namelist() if name.startswith("tiedemb/configs/")}
    shipped = {
        f"tiedemb/configs/{path.relative_to(ROOT / 'configs').as_posix()}"
        for path in (ROOT / "configs").rglob("*.yaml")
    }
    assert packed == shipped

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    # The dependencies: this environment's site-packages, after the new one's own (where the wheel goes).
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    installed = run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel))
    assert installed.returncode == 0, installed.stderr[-2000:]

    work = tmp_path / "work"  # the user's folder: empty, no configs, no main.py, no package source
    work.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(
        PATH=f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}",
        WANDB_MODE="offline",
        OMP_NUM_THREADS="1",
        TIEDEMB_LOG_LEVEL="info",
    )

    where = run(str(python), "-c", "import tiedemb; print(tiedemb.__file__)", cwd=work, env=env)
    assert Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout + where.stderr
    command = str(env_dir / "bin" / "tiedemb")
    shown = run(command, "--help", cwd=work, env=env)
    assert shown.returncode == 0 and "sweep" in shown.stdout, shown.stderr

    fit = run(
        command,
        "fit",
        "--config",
        "configs/tied_orth.yaml",
        "--config",
        "configs/scale/tiny.yaml",
        "--trainer.max_steps=2",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        cwd=work,
        env=env,
    )
    assert fit.returncode == 0, fit.stderr[-3000:]
    packaged = site / "tiedemb" / "configs"
    assert f"configs/tied_orth.yaml is not here: using the shipped {packaged / 'tied_orth.yaml'}" in fit.stderr
    assert "args parameter" not in fit.stdout + fit.stderr

    # One cell of a shipped sweep file: its cells' configs are shipped too, and the cell's process
    # finds the installed command (each more cell would only be another process start).
    swept = run(
        command,
        "sweep",
        "configs/sweeps/smoke.yaml",
        "--out",
        "sweep",
        "--cell",
        "0",
        cwd=work,
        env=env,
    )
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    (cell,) = (work / "sweep").glob("**/cell.json")
    status = cell.parent / "status.json"
    log = (cell.parent / "log.txt").read_text()  # each attempt's command line, then its output
    assert str(packaged / "tied.yaml") in log, log[:3000]
    assert '"state": "finished"' in status.read_text(), status
