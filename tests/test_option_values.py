"""Every option, every bad value: exit 2 and one message naming the option, never a traceback.

The options are read from the signatures of the four classes users configure and from the
argument parsers of the other commands, not from a list kept here; each gets every bad value its
type admits (``bad_values``): ``null`` where a value is needed, a value of the wrong type, zero, a
negative or out-of-range number, a number that is not finite. All of them run through the real
command lines (``python main.py fit ...``, ``python -m tiedemb.sweep ...``) in two subprocesses
(``reliability_helpers.run_command_lines_in_two_processes``), in a folder that must stay empty: the checks come
before any data is read or file written.
"""

from __future__ import annotations

import argparse
import importlib
import typing
from pathlib import Path
from typing import Any, Union

import pytest
from reliability_helpers import run_command_lines_in_two_processes
from tiny_runs import TINY_TIED

from tiedemb import GlueModule, PretrainModule
from tiedemb.cli import LINKED_FROM_DATA
from tiedemb.data import GlueData, PretrainData
from tiedemb.options import class_parameters, true_or_false

pytestmark = pytest.mark.end_to_end  # runs the real command lines

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"

# The command line each class is configured on; {glue} and {tokenizer} are filled in by the fixture.
PRETRAIN = [
    "fit",
    *TINY_TIED,
    "--trainer.max_steps=1",
]
GLUE = [
    "fit",
    "--config",
    str(CONFIGS / "glue" / "mrpc.yaml"),
    "--model.pretrained=null",
    "--model.hidden_size=32",
    "--model.num_layers=1",
    "--model.num_heads=2",
    "--model.intermediate_size=64",
    "--model.max_position_embeddings=64",
    "--data.tokenizer={tokenizer}",
    "--data.data_dir={glue}",
    "--data.max_length=32",
    "--trainer.max_steps=1",
]
CLASSES = {
    "model": [(PretrainModule, PRETRAIN), (GlueModule, GLUE)],
    "data": [(PretrainData, PRETRAIN), (GlueData, GLUE)],
}
# The other commands: module run with ``python -m`` -> the positional arguments it needs to parse.
COMMANDS = {
    "tiedemb.sweep": ["sweep.yaml", "--out", "out"],
    "tiedemb.report": ["runs"],
    "tiedemb.export": ["last.ckpt", "exported"],
}


# Tried on every number: zero, a negative number and the values just outside the ends the types declare.
NUMBERS = {int: [0, -1, 1, 7], float: [0, -1, 1, 1.5]}


def option_types(cls: type) -> dict[str, Any]:
    """The annotations of a class's options as LightningCLI shows them."""
    return {name: parameter.annotation for name, parameter in class_parameters(cls).items()}


def refuses(kind: type, value: Any) -> bool:
    try:
        kind(value)
    except ValueError:
        return True
    return False


def bad_values(hint: Any) -> list[str]:
    """Command-line texts of the values an annotation refuses, as YAML reads them."""
    kinds = _leaf_types(hint)
    values = [] if type(None) in _alternatives(hint) else ["null"]
    if str not in kinds:  # any text is a string: the wrong type for everything else
        values.append("abc")
    elif kinds == {str}:
        values.append("[1, 2]")
    elif kinds == {str, list}:  # a file or a list of files: a mapping is neither
        values.append("{{a: 1}}")  # braces doubled: a case's arguments are str.format-ted with its inputs
    for option in _alternatives(hint):
        kind = _base(option)
        if kind in NUMBERS and not any(_base(other) is str for other in _alternatives(hint)):
            values += [str(kind(value)) for value in NUMBERS[kind] if refuses(option, value)]
            if kind is float:
                values.append("nan")
    for pair in (option for option in _alternatives(hint) if typing.get_origin(option) is tuple):
        items = typing.get_args(pair)  # (betas: both numbers in [0, 1); 0.5 is a good value of each)
        values.append("[" + ", ".join(["0.5"] * (len(items) - 1)) + "]")  # one value short
        for i, item in enumerate(items):
            values += [
                "[" + ", ".join(["0.5"] * i + [bad] + ["0.5"] * (len(items) - i - 1)) + "]"
                for bad in bad_values(item)
                if bad not in ("null", "abc") or i == 0
            ]
    return list(dict.fromkeys(values))


def _alternatives(hint: Any) -> list[Any]:
    return list(typing.get_args(hint)) if typing.get_origin(hint) in (Union, typing.get_origin(int | None)) else [hint]


def _base(hint: Any) -> Any:
    """``int`` or ``float`` for a restricted number type, else the annotation itself."""
    return next((kind for kind in (bool, int, float) if isinstance(hint, type) and issubclass(hint, kind)), hint)


def _bounded(hint: Any) -> bool:
    return _base(hint) in NUMBERS and hint is not _base(hint)


def _leaf_types(hint: Any) -> set[Any]:
    return {typing.get_origin(_base(option)) or _base(option) for option in _alternatives(hint)} - {type(None)}


def class_cases() -> list[tuple[str, list[str], str, str]]:
    """(case id, command line, option as users name it, value) for every option of the four classes."""
    cases = []
    for prefix, classes in CLASSES.items():
        for cls, base in classes:
            for name, hint in option_types(cls).items():
                if name == "self":
                    continue
                for value in bad_values(hint):
                    if value == "null" and prefix == "model" and name in LINKED_FROM_DATA:
                        continue  # null is "from the data" for the settings the data decides
                    option = f"{prefix}.{name}"
                    cases.append((f"{cls.__name__}.{name}={value}", [*base, f"--{option}={value}"], option, value))
    return cases


REFUSED_TEXTS = {true_or_false: ("maybe", "")}
"""Texts the argparse types that are not numbers refuse (numbers: ``bad_values`` of their ``hint``)."""


def command_cases() -> list[tuple[str, list[str], str, str]]:
    """The same for every option of the argparse commands, read from each command's ``parser()``."""
    cases = []
    for module_name, positional in COMMANDS.items():
        parser: argparse.ArgumentParser = importlib.import_module(module_name).parser()
        command = ["-m", module_name, *positional]
        cases.append((f"{module_name} (nothing)", ["-m", module_name], "required", ""))
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            option = action.option_strings[-1]
            if action.nargs == 0:
                cases.append((f"{module_name} {option}=x", [*command, f"{option}=x"], option, "x"))
                continue
            values = ["<missing>"]
            if action.choices:
                values.append("nonsense")
            if _bounded(action.type):
                values += bad_values(action.type)
            values += list(REFUSED_TEXTS.get(action.type, ()))
            for value in dict.fromkeys(values):
                argument = [option] if value == "<missing>" else [f"{option}={value}"]
                cases.append((f"{module_name} {option}={value}", [*command, *argument], option, value))
    return cases


CASES = class_cases() + command_cases()


def test_every_option_of_the_four_classes_is_tried():
    """A new option is tried without touching this file, and every number declares its bounds."""
    tried = {case_id.split("=")[0] for case_id, *_ in class_cases()}
    for classes in CLASSES.values():
        for cls, _ in classes:
            for name, hint in option_types(cls).items():
                assert f"{cls.__name__}.{name}" in tried, f"{cls.__name__}.{name} gets no bad value"
                for option in _alternatives(hint):
                    if _base(option) in NUMBERS and typing.get_origin(hint) is not tuple:
                        assert _bounded(option), (
                            f"{cls.__name__}.{name}: a number without declared bounds (tiedemb.options)"
                        )
    assert len(CASES) > 250


@pytest.fixture(scope="module")
def outcomes(tiny_tokenizer_dir, tmp_path_factory) -> tuple[dict[str, dict], Path]:
    """Every case run in two subprocesses, in one folder that nothing may write to."""
    inputs = tmp_path_factory.mktemp("option_inputs")
    (inputs / "MRPC").mkdir()
    rows = "".join(f"{i % 2}\t{i}\t{i + 1}\tthe man is sleeping .\tthe man sleeps .\n" for i in range(8))
    for split in ("train.tsv", "dev.tsv"):
        (inputs / "MRPC" / split).write_text(MRPC_HEADER + rows)
    work = tmp_path_factory.mktemp("option_runs")
    scratch = tmp_path_factory.mktemp("option_scratch")
    values = {"glue": str(inputs), "tokenizer": str(tiny_tokenizer_dir)}
    cases = {case_id: [arg.format(**values) for arg in args] for case_id, args, _, _ in CASES}
    results = run_command_lines_in_two_processes(cases, work, scratch)
    return results, work


@pytest.mark.parametrize(
    ("case_id", "option"),
    [(case_id, option) for case_id, _, option, _ in CASES],
    ids=[case_id for case_id, *_ in CASES],
)
def test_bad_value_gets_one_message_naming_the_option(outcomes, case_id, option):
    result = outcomes[0][case_id]
    stderr = result["stderr"]
    assert result["returncode"] == 2, stderr[-2000:]
    assert "Traceback" not in stderr + result["stdout"], stderr[-2000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and option in errors[0], stderr[-2000:]
    # the message and at most a hint where to look (and Lightning's "Seed set to" note before it):
    # no usage block, no warnings around it
    assert all(line.startswith(("error:", "hint:", "Seed set to")) for line in lines), stderr[-2000:]


def test_no_bad_value_wrote_anything(outcomes):
    """Refused before any file is written: no runs/ folder, no data cache, no W&B folder."""
    assert sorted(path.name for path in outcomes[1].iterdir()) == []


def test_the_reported_example_is_among_the_cases():
    """The command that used to end in a 40-line traceback from jsonargparse's union matching."""
    assert "PretrainData.synthetic_tokens=null" in {case_id for case_id, *_ in CASES}
