"""tiedemb's own commands spell their options with dashes; the underscore spelling is a hidden alias."""

from __future__ import annotations

import importlib
import re

import pytest

from tiedemb.command import COMMANDS, LIGHTNING_SUBCOMMANDS

OWN_COMMANDS = sorted(name for name in COMMANDS if name not in LIGHTNING_SUBCOMMANDS)

#: command -> (its required arguments, options of more than one word as --help shows them)
SPELLED = {
    "sweep": (["s.yaml", "--out", "o"], ["--dry-run"]),
    "export": (["run.ckpt", "out"], ["--no-tokenizer", "--weights-only", "false"]),
}


def parser_of(command: str):
    return importlib.import_module(COMMANDS[command][0]).parser()


def underscored(tokens: list[str]) -> list[str]:
    return [re.sub(r"^--[a-z-]+", lambda found: found[0][:2] + found[0][2:].replace("-", "_"), t) for t in tokens]


def test_every_own_command_with_options_of_several_words_is_covered():
    several = {
        command
        for command in OWN_COMMANDS
        for action in parser_of(command)._actions
        for option in action.option_strings
        if option.startswith("--") and "-" in option[2:] and option != "--help"
    }
    assert several == set(SPELLED)


@pytest.mark.parametrize("command", sorted(SPELLED))
def test_both_spellings_parse_to_the_same_options(command):
    required, options = SPELLED[command]
    dashed = parser_of(command).parse_args(required + options)
    alias = parser_of(command).parse_args(required + underscored(options))
    assert underscored(options) != options
    assert vars(alias) == vars(dashed)
    assert vars(dashed) != vars(parser_of(command).parse_args(required))  # the options took effect


@pytest.mark.parametrize("command", OWN_COMMANDS)
def test_help_shows_one_spelling_with_dashes(command):
    shown = parser_of(command).format_help()
    assert not re.findall(r"--[a-z]+_[a-z_]+", shown)
    for option in SPELLED.get(command, ([], []))[1]:
        if option.startswith("--"):
            assert option.split("=")[0] in shown
