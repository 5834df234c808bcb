"""The package imports cleanly: no import cycles, and the model code alone stays light."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import tiedemb

ROOT = Path(__file__).resolve().parents[1]
CHECKER = Path(__file__).resolve().parent / "import_cycles.py"
HEAVY = ("lightning", "datasets", "transformers")
LAYERS = [
    ["tiedemb.errors", "tiedemb.lazy"],
    ["tiedemb.options"],
    ["tiedemb.nn"],
    ["tiedemb.theory", "tiedemb.training"],
    ["tiedemb.weights", "tiedemb.data", "tiedemb.resume"],
    ["tiedemb.modules"],
    ["tiedemb.cli"],
    ["tiedemb.experiments"],
    [
        "tiedemb.sweep",
        "tiedemb.report",
        "tiedemb.rate_report",
        "tiedemb.export",
        "tiedemb.data_command",
        "tiedemb.predict",
        "tiedemb.command",
    ],
    ["tiedemb.__main__"],
]
"""docs/architecture.md's layers, bottom first: a module may import only from layers below its own."""


def run_python(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def write_package(folder: Path, modules: dict[str, str]) -> None:
    """A small package on disk: an empty ``__init__.py`` and the given modules."""
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name, source in modules.items():
        (folder / name).write_text(source)


@pytest.mark.end_to_end
def test_every_module_imports_in_a_fresh_interpreter_without_a_cycle():
    result = run_python(str(CHECKER), "tiedemb", str(ROOT))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "no import cycle" in result.stdout


@pytest.mark.end_to_end
def test_the_cycle_check_finds_a_cycle_that_imports_without_error(tmp_path):
    write_package(
        tmp_path / "cyclic",
        {
            "first.py": "import cyclic.second\nVALUE = 1\n",
            "second.py": "from cyclic import first\n",  # works: nothing is read from first yet
        },
    )
    assert run_python("-c", "import cyclic.first", cwd=tmp_path).returncode == 0
    result = run_python(str(CHECKER), "cyclic", str(tmp_path))
    assert result.returncode == 1
    assert "cyclic.second imports cyclic.first while cyclic.first is still being imported" in result.stdout


@pytest.mark.end_to_end
def test_the_cycle_check_finds_a_cycle_hidden_in_a_deferred_import(tmp_path):
    write_package(
        tmp_path / "deferred",
        {
            "config.py": "def check():\n    from deferred.heads import HEADS\n    return HEADS\n",
            "heads.py": "from deferred.config import check\nHEADS = {}\n",
        },
    )
    result = run_python(str(CHECKER), "deferred", str(tmp_path))
    assert result.returncode == 1
    assert "import cycle in the source: deferred.config <-> deferred.heads" in result.stdout


@pytest.mark.end_to_end
def test_model_code_and_theory_import_without_lightning_datasets_or_transformers():
    script = (
        f"import sys\nimport tiedemb.nn, tiedemb.theory\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))"
    )
    result = run_python("-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "[]"


@pytest.mark.end_to_end
def test_the_package_exports_its_modules_on_first_use():
    script = (
        "import sys, tiedemb\nassert 'lightning' not in sys.modules\n"
        "from tiedemb import PretrainModule, GlueModule\nfrom tiedemb.data import PretrainData\n"
        "print(PretrainModule.__module__, GlueModule.__module__, PretrainData.__module__)\n"
        # the embedded corpus needs neither datasets nor pyarrow (half a second of every such run's start)
        "data = PretrainData(synthetic_tokens=4096, block_size=16, batch_size=4)\ndata.setup('fit')\n"
        "next(iter(data.train_dataloader()))\nprint(sorted({'datasets', 'pyarrow'} & set(sys.modules)))"
    )
    result = run_python("-c", script)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-2].split() == ["tiedemb.modules.pretrain", "tiedemb.modules.glue", "tiedemb.data.pretrain"]
    assert lines[-1] == "[]"


def layer_of(module: str) -> int:
    for index, members in enumerate(LAYERS):
        if any(module == member or module.startswith(member + ".") for member in members):
            return index
    raise AssertionError(f"{module} is in no layer of docs/architecture.md")


def test_imports_point_only_down_the_layers():
    sys.path.insert(0, str(CHECKER.parent))
    try:
        from import_cycles import source_dependencies
    finally:
        sys.path.pop(0)
    names = [info.name for info in pkgutil.walk_packages(tiedemb.__path__, "tiedemb.")]
    modules = {name: Path(importlib.util.find_spec(name).origin) for name in names}
    upward = [
        f"{module} -> {target}"
        for module, targets in source_dependencies(modules).items()
        for target in targets
        if layer_of(target) >= layer_of(module) and target.split(".")[:2] != module.split(".")[:2]
    ]  # within one package anything goes
    assert not upward, "imports that do not point down the layers: " + "; ".join(sorted(upward))
