"""The command line's parser: jsonargparse's report on a mistake (a failed match against every type it
could have been, and the usage block) cut down to the option and what is wrong with it in YAML's words
(``--model.hidden_size: expected int or null, got abc``), the nearest valid key for a typo, and a hint.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from typing import Any, NoReturn

from lightning.pytorch.cli import LightningArgumentParser

from tiedemb.options import parameters_of
from tiedemb.training.exits import DEBUG_ENV, USER_ERROR_EXIT
from tiedemb.training.shipped_configs import resolve_config_args

NO_CLASS = re.compile(r"required: .*\b(model|data)\b|'lightning\.(LightningModule|LightningDataModule)'")
"""A parse error caused by a command line that names no model or data class."""


class ArgumentParser(LightningArgumentParser):
    """Reports a command-line mistake in two lines, not the usage block; reads shipped configs."""

    def parse_args(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        # Here, not in LightningCLI's caller: LightningCLI warns when handed the process's own command line.
        if args is None or isinstance(args, (list, tuple)):
            args = [str(arg) for arg in (sys.argv[1:] if args is None else args)]
            args = resolve_config_args(args)
        return super().parse_args(args, *rest, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get(DEBUG_ENV):
            super().error(message, ex)  # raises (embedded use) or prints jsonargparse's full report
        parser = getattr(ex, "subcommand_parser", None) or self
        command = parser.prog.replace(" [options]", "")
        hint = f"run `{command} --help` for the options"
        if NO_CLASS.search(message):
            hint = (
                "a config names the model and data classes (--config configs/tied.yaml); without one, name "
                "them: --model=tiedemb.PretrainModule --data=tiedemb.data.PretrainData"
            )
        nearest = nearest_valid_key(message, parser)
        suggestion = f"; did you mean {nearest}?" if nearest else ""
        sys.stderr.write(f"error: {choice_mismatch(condense_parse_error(message))}{suggestion}\nhint: {hint}\n")
        self.exit(USER_ERROR_EXIT)


TYPO_SIMILARITY = 0.8
"""``difflib`` similarity from which an unknown key is taken for a typo of a valid one
(``hiden_size``/``hidden_size`` 0.95, ``max_step``/``max_steps`` 0.94; ``vocab_size``/``eval_batch_size`` 0.64)."""


def nearest_valid_key(message: str, parser: Any) -> str | None:
    """For an unknown key (a typo), the nearest valid one: a class's keyword among the class's own keywords,
    any other key among the options of ``parser``; only a near miss."""
    import difflib

    by_class = re.search(r"class_path '([^']+)':\s*Option '([^']+)' is not accepted", message)
    if by_class:
        valid = list(parameters_of(by_class.group(1)) or ())
        unknown = by_class.group(2)
    else:
        found = re.search(r"does not accept option '([^']+)'", message) or re.search(
            r"unrecognized arguments: --([\w.]+)", message
        )
        if not found:
            return None
        unknown = found.group(1)
        valid = [
            action.dest
            for action in getattr(parser, "_actions", [])
            if action.dest not in ("help", argparse.SUPPRESS) and not action.dest.endswith(".help")
        ]
    nearest = difflib.get_close_matches(unknown, valid, n=1, cutoff=TYPO_SIMILARITY)
    return nearest[0] if nearest else None


def condense_parse_error(message: str) -> str:
    """jsonargparse's report on a bad value, cut down to the option and what is wrong with it."""
    lines = [line for line in message.splitlines() if line.strip()]
    key_match = re.match(r'Parser key "([^"]+)":', lines[0].strip()) if lines else None
    key = key_match.group(1) if key_match else None
    problem = next((i for i, line in enumerate(lines) if "Problem with given class_path" in line), None)
    if key is None:
        return " ".join(line.strip() for line in lines)
    if problem is None:
        rest = [lines[0].strip()[key_match.end() :].strip(), *(line.strip() for line in lines[1:])]
        return f"--{key}: " + (
            _union_mismatch(message)
            or _plain_types(" ".join(line for line in rest if line and not line.startswith("Given value")))
        )
    indent = len(lines[problem]) - len(lines[problem].lstrip())
    option, detail = key, []
    for line in lines[problem + 1 :]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        nested = re.match(r'Parser key "([^"]+)":', line.strip())
        if nested:
            option = f"{option}.{nested.group(1)}"
        else:
            detail.append(line.strip())
    if option == key:  # the class itself is the problem: name it
        class_path = re.search(r"class_path '([^']+)'", lines[problem])
        option += f" {class_path.group(1)!r}" if class_path else ""
    return f"--{option}: " + (_union_mismatch("\n".join(detail)) or _plain_types(" ".join(detail)))


LITERAL_MISMATCH = re.compile(
    r"^--(?P<option>\S+): (?:expected|Expected a) typing\.Literal\[(?P<choices>[^\]]*)\](?: or null)?[.,]? "
    r"(?:got|Got value:) (?P<value>.*)$"
)
"""A value outside a ``Literal`` option's choices, as ``condense_parse_error`` words it."""


def choice_mismatch(condensed: str) -> str:
    """A value outside an option's choices said as every choice is (``tiedemb.errors.check_choice``):
    ``--model.objective='xlm' is not a known choice; valid: mlm, clm``; other messages unchanged."""
    found = LITERAL_MISMATCH.match(condensed)
    if found is None:
        return condensed
    try:
        choices = ast.literal_eval(f"[{found['choices']}]")
    except (SyntaxError, ValueError):
        return condensed
    return (
        f"--{found['option']}={found['value'].strip()!r} is not a known choice; "
        f"valid: {', '.join(str(choice) for choice in choices)}"
    )


def _union_mismatch(message: str) -> str | None:
    """``expected list[str] or null, got 5`` for jsonargparse's report on a value no type of a union takes."""
    subtypes = re.search(r"Subtypes: \[(.*)\]", message)
    given = re.search(r"Given value: (.*)", message)
    if "Does not validate against any of the Union subtypes" not in message or not (subtypes and given):
        return None
    kinds = [_plain_types(kind.strip()) for kind in re.split(r",\s*(?![^\[]*\])", subtypes.group(1))]
    return f"expected {' or '.join(kinds)}, got {given.group(1).strip()}"


def _plain_types(text: str) -> str:
    """``<class 'int'>`` as ``int`` and ``NoneType`` as ``null``, the words a YAML user knows."""
    text = re.sub(r"(?:typing\.)?Annotated\[([^,\[\]]+), [^\]]*\]", r"\1", text)  # bounds: see tiedemb.options
    text = re.sub(r"Expected a <class '(?:builtins\.)?([\w.]+)'>", r"Expected \1", text)
    return re.sub(r"<class '(?:builtins\.)?([\w.]+)'>", r"\1", text).replace("NoneType", "null")
