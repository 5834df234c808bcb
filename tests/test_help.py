"""``--help``: how to list the model's and the data's options comes first, and every option they list is described.

``python main.py fit --help`` opens with a short usage line and the ``--model.help CLASS`` /
``--data.help CLASS`` lines, before Lightning's long list of Trainer options. ``--model.help`` and
``--data.help`` print each option of the class with its description, from the ``Args:`` of the
``__init__`` docstrings (the module's own and ``TransformerModule``'s, which it passes ``**kwargs`` on
to) and of the data modules' docstrings.
"""

from __future__ import annotations

import re

import pytest

from tiedemb.cli import main


def help_text(capsys, *args: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    assert exited.value.code == 0
    return capsys.readouterr().out


def option_descriptions(text: str) -> dict[str, str]:
    """Each ``--group.key`` option of a help text and the words describing it (its type and default left out)."""
    entries = re.split(r"\n(?=  -)", text.split("\n\n", 1)[1])
    found = {}
    for entry in entries:
        first, *rest = entry.split("\n")
        spelled = re.match(r"  (--[\w.]+)(?: \S+)?(?:, --[\w.+]+(?: \S+)?)*(?:\s{2,}(.*))?$", first)
        if spelled is None or "." not in spelled.group(1):
            continue
        words = " ".join([spelled.group(2) or "", *(line.strip() for line in rest)]).strip()
        found[spelled.group(1)] = words.split("(type:")[0].strip()
    return found


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
def test_the_help_says_first_how_to_list_the_model_and_data_options(capsys, subcommand):
    text = help_text(capsys, subcommand, "--help")
    usage, guide = text.split("\n\n")[:2]
    assert re.match(rf"usage: \S+ \[options\] {subcommand} \[", usage) and len(usage) <= 120, usage
    guide = " ".join(guide.split())  # jsonargparse's own formatter wraps the description's lines
    for words in ("--model.help PretrainModule", "--data.help PretrainData", "GlueModule", "GlueData", "RUN_DIR"):
        assert words in guide, (words, guide)


@pytest.mark.parametrize(
    ("group", "name", "described"),
    [
        (
            "model",
            "PretrainModule",
            {
                "--model.hidden_size": "Width of the residual stream",
                "--model.learning_rate": "AdamW's peak learning rate",
            },
        ),
        (
            "model",
            "GlueModule",
            {
                "--model.classifier_dropout": "Dropout before the classifier",
                "--model.warmup_steps": "Unset: warmup_ratio",
            },
        ),
        (
            "data",
            "PretrainData",
            {"--data.cache_dir": "where tokenised text", "--data.block_size": "tokens per training"},
        ),
        (
            "data",
            "tiedemb.data.GlueData",
            {"--data.max_length": "tokens per example", "--data.data_dir": "glue_data folder"},
        ),
    ],
)
def test_every_option_of_a_model_or_data_class_is_described(capsys, group, name, described):
    options = option_descriptions(help_text(capsys, "fit", f"--{group}.help", name))
    assert len(options) >= 10, options  # the parse found the class's options
    assert [option for option, words in options.items() if not words] == []
    for option, words in described.items():
        assert words in options[option], (option, options[option])
