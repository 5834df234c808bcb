"""``tiedemb SUBCOMMAND ...``: one command for everything a user runs (``python -m tiedemb`` too), each
subcommand the ``main`` of its module, imported only when chosen (``tiedemb --help`` loads no torch).
``predict RUN --input FILE`` is ``tiedemb.predict``; ``predict --config ...`` the LightningCLI's.
"""

from __future__ import annotations

import importlib
import sys

from tiedemb import __version__

#: subcommand -> (module whose ``main(argv)`` runs it, one line for ``tiedemb --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("tiedemb.cli", "train a model from YAML configs (LightningCLI)"),
    "validate": ("tiedemb.cli", "evaluate on the validation data"),
    "test": ("tiedemb.cli", "evaluate on the test data (GLUE: the labelled dev splits)"),
    "predict": ("tiedemb.cli", "RUN --input pairs.tsv: a GLUE run labels sentence pairs (or --config ...)"),
    "similarity": ("tiedemb.cli", "zero-shot paraphrase ROC-AUC of a sentence encoder (no training)"),
    "sweep": ("tiedemb.sweep", "run, list or check the cells of a sweep file"),
    "report": ("tiedemb.report", "tables and curves of a folder of runs"),
    "rate-report": (
        "tiedemb.rate_report",
        "each variant at the learning rate a fixed rule picks: the picks and the claims at every rate",
    ),
    "export": ("tiedemb.export", "a next-token checkpoint as a transformers model folder (GPT-NeoX)"),
    "data": ("tiedemb.data_command", "fetch the studies' text, GLUE and tokenizer into data/ (data prepare NAME ...)"),
}
LIGHTNING_SUBCOMMANDS = {name for name, (module, _) in COMMANDS.items() if module == "tiedemb.cli"}
RUN_PREDICT = "tiedemb.predict"
"""``tiedemb predict RUN --input FILE`` (the LightningCLI's ``predict`` takes no first argument, nor ``--input``)."""


def predicts_from_a_run(argv: list[str]) -> bool:
    """Whether ``predict ...`` names a run (a first argument that is no option) or an ``--input`` file."""
    rest = argv[1:]
    return bool(rest) and (
        not rest[0].startswith("-") or any(arg == "--input" or arg.startswith("--input=") for arg in rest)
    )


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: tiedemb SUBCOMMAND [options]   (tiedemb SUBCOMMAND --help for its options)",
        "",
        f"tiedemb {__version__}: tied input/output embeddings and embedding width in Transformer encoders",
        "",
        "subcommands:",
    ]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        print(__version__)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"error: unknown subcommand {name!r}; one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if name == "predict" and predicts_from_a_run(argv):
        return int(importlib.import_module(RUN_PREDICT).main(argv[1:]) or 0)
    module = importlib.import_module(COMMANDS[name][0])
    if name in LIGHTNING_SUBCOMMANDS:
        # LightningCLI reads sys.argv itself, and warns when also handed a list: a list only from Python
        module.main(None if from_command_line else argv)  # exits with its own status on a mistake or a preemption
        return 0
    return int(module.main(argv[1:]) or 0)
