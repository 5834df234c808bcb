"""Every command README.md and docs/*.md show, and how the tests run it as written.

``tests/test_docs_commands.py`` runs README.md's commands, ``tests/test_docs_pages_commands.py``
those of docs/*.md: two files, so two test workers run them side by side (docs/experiments.md's
later sections run in the first, to even out the two: ``BESIDE_README``). The commands are read
from the Markdown itself (fenced ``bash`` blocks), so a command added to
the docs later is covered without touching this file. A command is one that runs ``main.py``,
``tiedemb`` or ``python -m tiedemb...``; the rest of a shell line (``python3 -m venv ... &&``,
``pip install``) is setup and is not run. ``for`` loops are expanded, one test per iteration.

Each command runs in a subprocess, with its default loggers (W&B offline, CSV), from a scratch
copy of the repository's layout (``WORK/repo``), so relative paths such as ``configs/...``,
``runs/...`` and ``data/...`` mean what the docs say while nothing is written into the checkout.
``WORK/repo/data`` holds what ``tiedemb data prepare`` writes there (text, GLUE, tokenizer): the real
files of ``../shared/data`` where they exist, else made-up data in their layout
(``tests/stand_in_data.py``), so every command runs in any clone. What may change, all of it
written down below:

* ``SHRINK``: overlays that only make a run smaller are appended (tiny scale, a few steps, one
  validation batch). A sweep file takes no command-line options, so the same shrinking settings
  are added to every study's ``overrides`` in the scratch copy of the sweep file, and its seed
  axis keeps one seed.
* ``fill_placeholder``: ``runs/.../last.ckpt``, ``<id>``, ``CKPT`` and the like name a
  checkpoint; they are filled with the newest matching file written by the commands documented
  before (which run first when a test is selected alone).
* ``NEEDS``: commands that need what a CPU machine without network cannot have (a GPU, the
  Hugging Face hub, DeepSpeed, several nodes, a W&B server) carry the ``gpu`` or the ``network``
  marker, so the default run leaves them out; selected anyway (``-m gpu``), they are skipped with
  the reason where the machine still lacks what they need.
* ``MINUTES``: commands that take minutes even shrunk carry the ``docs`` marker; they are left out
  of the default ``pytest`` run; ``pytest -m docs`` runs them.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import yaml
from stand_in_data import write_stand_in_data

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT / ".." / "shared").resolve()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"bash", "sh", "shell"}
TIMEOUT_S = 900

#: README.md's commands today (Quick start 1; Data 1, the download; common tasks 7: a tiny fit and its
#: export, an MRPC fit, its test and a prediction, a sweep and its report): fewer found means the
#: extractor broke, not that docs shrank.
README_COMMANDS_TODAY = 9

#: (regular expression searched in the command as written, why this machine cannot run it, the
#: marker that keeps it out of the default run: ``gpu`` for GPU machines, ``network`` for a hub or server).
NEEDS: list[tuple[str, str, str]] = [
    (r"^torchrun\b", "a multi-node launch (torchrun on several GPU machines)", "gpu"),
    (r"^srun\b", "a SLURM job on GPU nodes", "gpu"),
    (r"configs/strategy/(fsdp|deepspeed)", "FSDP and DeepSpeed run on CUDA GPUs only", "gpu"),
    (r"\bdeepspeed\b", "needs the deepspeed package and CUDA GPUs", "gpu"),
    (
        r"configs/scale/base\.yaml|--trainer\.precision=bf16",
        "BERT-base scale in bf16: a GPU job (hours on a CPU)",
        "gpu",
    ),
    (r"--trainer\.accelerator=(gpu|cuda)", "needs a CUDA GPU", "gpu"),
    (
        r"configs/data/wikitext103\.yaml",
        "needs the Hugging Face hub (WikiText-103 and the bert-base-uncased tokenizer)",
        "network",
    ),
    (
        r"--model\.pretrained[ =]bert-base-uncased",
        "needs the Hugging Face hub (BERT weights bert-base-uncased)",
        "network",
    ),
    # configs/glue/*.yaml name the hub tokenizer bert-base-uncased; a command that names a local one runs.
    (
        r"^(?!.*--data\.tokenizer).*configs/glue/",
        "needs the Hugging Face hub (configs/glue/*.yaml load the bert-base-uncased tokenizer from it)",
        "network",
    ),
    (r"\bwandb (sync|sweep|agent)\b", "needs a W&B server", "network"),
    (
        r"\btiedemb data prepare\b",
        "fetches from NLTK's server and the Hugging Face hub",
        "network",
    ),
]

#: (regular expression, why): commands that take minutes even when shrunk; marked ``docs``.
MINUTES: list[tuple[str, str]] = [
    (r"tiedemb\.(sweep|report)|runs/smoke", "runs or reads the smoke sweep: a process per run"),
    (r"--trainer\.strategy=ddp", "two training processes"),
    (r"^python \S*main\.py validate .*--model\.hidden_size=768", "the initial-loss loop: five runs on real text"),
]

#: Appended to a pretraining command (``fit``/``validate``/``test``/``predict`` with no
#: GLUE config): the tiny scale overlay, last so it wins, then fewer steps and batches. tiny.yaml
#: validates every 3 steps, so a 3-step fit still validates once.
SHRINK_PRETRAIN = [
    "--config",
    "configs/scale/tiny.yaml",
    "--trainer.max_steps=3",
    "--trainer.limit_val_batches=1",
    "--trainer.limit_test_batches=1",
    "--trainer.limit_predict_batches=1",
]
#: Appended to a GLUE command: a small training subset, one epoch, one evaluation batch.
SHRINK_GLUE = [
    "--data.max_train_samples=64",
    "--trainer.max_epochs=1",
    "--trainer.max_steps=2",
    "--trainer.limit_val_batches=1",
    "--trainer.limit_test_batches=1",
    "--trainer.limit_predict_batches=1",
]
#: Appended to an evaluation of a checkpoint alone (no ``--config``): the checkpoint decides the model
#: and the data, so only the batches are fewer.
SHRINK_CHECKPOINT = [
    "--trainer.limit_val_batches=1",
    "--trainer.limit_test_batches=1",
    "--trainer.limit_predict_batches=1",
]
#: Added to every study's overrides in the scratch copy of a sweep file named by a command.
SHRINK_SWEEP_STUDY = {"trainer.max_steps": 3, "trainer.limit_val_batches": 1, "trainer.limit_test_batches": 1}
SHRINK_SWEEP_GLUE_STUDY = {"data.max_train_samples": 64, "trainer.max_epochs": 1}
#: Added to a pretraining study's overrides: one validation at step 3, counted across epochs, since
#: the made-up text of a clone without the real data fills fewer batches than a study's interval.
SHRINK_SWEEP_PRETRAIN_STUDY = {"trainer.val_check_interval": 3, "trainer.check_val_every_n_epoch": None}
#: The grid axis a sweep repeats runs over; the scratch copy keeps its first seed only. A study's
#: first other axis keeps its first and last value (both when it has two: every cell the docs name
#: with seed=0 stays), so a chained study still finds its upstream cells (the pretrained route's d_e
#: matches, the re-initialised route's full width is the last); any later axis keeps its first
#: value (a study still compares two settings, at half the cells per extra axis).
SEED_AXIS = "seed_everything"
RUN_SUBCOMMANDS = {"fit", "validate", "test", "predict"}


# --------------------------------------------------------------------------- extraction
@dataclasses.dataclass(frozen=True)
class DocCommand:
    doc: str  # path relative to the repository
    line: int  # first line of the command in the document
    argv: tuple[str, ...]
    binding: str = ""  # loop variable and value, e.g. "h=tied"

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    @property
    def id(self) -> str:
        words = [self.subcommand] + [Path(a).stem for a in self.argv if a.endswith(".yaml")]
        words += [a.lstrip("-") for a in self.argv if a in ("--print_config", "--help")]
        words += [self.binding] if self.binding else []
        return f"{Path(self.doc).stem}:{self.line}:" + "-".join(w for w in words if w)

    @property
    def subcommand(self) -> str:
        argv = list(self.argv)
        for index, arg in enumerate(argv):
            if arg == "main.py" or arg.endswith("/main.py"):
                return next((a for a in argv[index + 1 :] if not a.startswith("-")), "")
            if arg == "-m" and index + 1 < len(argv):
                return argv[index + 1]
        return argv[0]


def strip_comment(line: str) -> str:
    """``line`` up to a ``#`` that starts a word outside quotes (bash's rule, unlike shlex's)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def shell_lines(markdown: str) -> Iterator[tuple[int, str]]:
    """(first line number, logical line) of every fenced shell block, continuations joined."""
    in_block, pending, start = False, "", 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        fence = re.match(r"^\s*```\s*(\S*)", line)
        if fence:
            in_block = not in_block and fence.group(1).lower() in SHELL_LANGUAGES
            pending = ""
            continue
        if not in_block:
            continue
        code = strip_comment(line).rstrip()
        if not pending:
            start = number
        if code.endswith("\\"):
            pending += code[:-1] + " "
            continue
        yield start, pending + code
        pending = ""


def statements(logical: str) -> list[list[str]]:
    """The simple commands of a line: tokens split at ``&&``, ``||``, ``|`` and ``;``."""
    lexer = shlex.shlex(logical, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, ""
    found: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set(";&|"):
            found.append([])
        else:
            found[-1].append(token)
    return [tokens for tokens in found if tokens]


def runs_tiedemb(tokens: list[str]) -> bool:
    """Whether a simple command runs main.py or the tiedemb package (possibly under a launcher)."""
    return (
        tokens[0] == "tiedemb"
        or any(t == "main.py" or t.endswith("/main.py") for t in tokens)
        or any(a == "-m" and b.split(".")[0] == "tiedemb" for a, b in zip(tokens, tokens[1:]))
    )


def extract(markdown: str, doc: str) -> list[DocCommand]:
    """Every tiedemb command of a Markdown text, loops expanded, in document order."""
    loops: list[tuple[str, list[str]]] = []  # open ``for VAR in VALUES`` loops, outermost first
    found: list[DocCommand] = []
    for number, logical in shell_lines(markdown):
        for tokens in statements(logical):
            if tokens[0] == "for" and len(tokens) >= 3 and tokens[2] == "in":
                loops.append((tokens[1], tokens[3:]))
                continue
            if tokens[0] == "done":
                loops.pop()
                continue
            if tokens[0] == "do":
                tokens = tokens[1:]
            if not tokens or not runs_tiedemb(tokens):
                continue
            for values in product(*(values for _, values in loops)):
                names = [name for name, _ in loops]
                argv = tuple(substitute(token, dict(zip(names, values))) for token in tokens)
                binding = ",".join(f"{n}={v}" for n, v in zip(names, values))
                found.append(DocCommand(doc, number, argv, binding))
    return found


def substitute(token: str, variables: dict[str, str]) -> str:
    """``$VAR`` and ``${VAR}`` of the enclosing loops replaced by this iteration's values."""
    for name, value in variables.items():
        token = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, token)
    return token


def documented_commands() -> list[DocCommand]:
    return [
        command for path in DOCS for command in extract(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]


def first_match(table: list[tuple[str, ...]], command: DocCommand) -> str | None:
    return next((reason for pattern, reason, *_ in table if re.search(pattern, command.text)), None)


def needed_marker(command: DocCommand) -> str | None:
    """``gpu`` or ``network`` for a command ``NEEDS`` names, else None."""
    return next((marker for pattern, _, marker in NEEDS if re.search(pattern, command.text)), None)


def as_param(command: DocCommand) -> Any:  # a pytest ParameterSet
    marks = [pytest.mark.docs] if first_match(MINUTES, command) else []
    needed = needed_marker(command)
    if needed:
        marks.append(getattr(pytest.mark, needed))
    return pytest.param(command, id=command.id, marks=marks)


COMMANDS = documented_commands()


# --------------------------------------------------------------------------- the scratch workspace
@dataclasses.dataclass
class Outcome:
    result: subprocess.CompletedProcess
    started: float
    seconds: float


class Workspace:
    """``WORK/repo``: main.py, tiedemb, a copy of configs, and data/ with the prepared data's folders
    (the real ../shared/data's, or made-up data in their layout where there is none).

    Commands run here in document order; each runs once per session (``run``).
    """

    def __init__(self, root: Path) -> None:
        self.repo = root / "repo"
        self.repo.mkdir(parents=True)
        for name in ("main.py", "tiedemb"):
            (self.repo / name).symlink_to(ROOT / name)
        # A copy, not a link: sweep files are shrunk in place here, never in the checkout.
        shutil.copytree(ROOT / "configs", self.repo / "configs")
        # data/ itself is a folder of the workspace: runs write their caches under it.
        data = SHARED / "data" if SHARED.is_dir() else write_stand_in_data(root / "stand_in_data")
        (self.repo / "data").mkdir()
        for name in ("text", "glue", "tokenizers"):
            (self.repo / "data" / name).symlink_to(data / name)
        self.outcomes: dict[DocCommand, Outcome] = {}
        self.env = {**os.environ}
        if "WANDB_MODE" not in self.env and wandb_credentials():
            self.env["WANDB_MODE"] = "offline"  # a machine with a W&B account must not upload test runs
        self.env.pop("TIEDEMB_DEBUG", None)  # user errors must look as users see them

    def run(self, command: DocCommand) -> Outcome:
        same = next((outcome for earlier, outcome in self.outcomes.items() if earlier.argv == command.argv), None)
        if same is not None and command not in self.outcomes:
            self.outcomes[command] = same  # the same command shown twice (README and docs) runs once
        if command not in self.outcomes:
            for earlier in COMMANDS[: COMMANDS.index(command)]:
                if earlier.doc == command.doc and earlier not in self.outcomes and self.placeholders_unfilled(command):
                    if self.reason_to_skip(earlier) is None:
                        self.run(earlier)
            argv = self.prepare(command)
            started = time.time()
            result = subprocess.run(
                argv,
                cwd=self.repo,
                env=self.env,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=TIMEOUT_S,
            )
            self.outcomes[command] = Outcome(result, started, time.time() - started)
        return self.outcomes[command]

    def reason_to_skip(self, command: DocCommand) -> str | None:
        return first_match(NEEDS, command)

    # -- what changes between the docs and the run, each rule in one place -----------------------
    def prepare(self, command: DocCommand) -> list[str]:
        argv = [self.fill_placeholder(arg) for arg in command.argv]
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the interpreter running the tests, with tiedemb's dependencies
        if "--print_config" in argv or "--help" in argv or "-h" in argv:
            return argv  # nothing is run
        if command.subcommand in RUN_SUBCOMMANDS:
            glue = any("configs/glue/" in arg for arg in argv)
            after = argv[argv.index(command.subcommand) + 1 :] if command.subcommand in argv else []
            run_folder = (
                command.subcommand in ("validate", "test", "predict") and bool(after) and not after[0].startswith("-")
            )
            checkpoint_alone = "--config" not in argv and (
                run_folder or any(arg.startswith("--ckpt_path") for arg in argv)
            )
            argv += SHRINK_CHECKPOINT if checkpoint_alone else SHRINK_GLUE if glue else SHRINK_PRETRAIN
        elif command.subcommand == "tiedemb.sweep":
            self.shrink_sweep_file(Path(argv[argv.index(command.subcommand) + 1]))
            if "--out" in argv and Path(argv[argv.index("--out") + 1]).is_absolute():
                argv[argv.index("--out") + 1] = str(self.repo / "runs" / "sweep")  # keep it in the scratch folder
        return argv

    def shrink_sweep_file(self, relative: Path) -> None:
        """The scratch copy of a sweep file: one seed, every run shrunk."""
        path = self.repo / relative
        sweep = yaml.safe_load(path.read_text())
        for study in [sweep, *(sweep.get("studies") or {}).values()]:
            grid = study.get("grid") or {}
            compared = [axis for axis in grid if axis != SEED_AXIS][:1]
            for axis, values in grid.items():
                names = list(values)  # a dict's names, a list's values
                kept = names[:: max(1, len(names) - 1)] if axis in compared else names[:1]  # first (and last)
                grid[axis] = {name: values[name] for name in kept} if isinstance(values, dict) else kept
        for study in (sweep.get("studies") or {"": sweep}).values():
            configs = [*(sweep.get("configs") or []), *(study.get("configs") or [])]
            glue = any("glue" in c for c in configs)
            shrink = {**SHRINK_SWEEP_STUDY, **(SHRINK_SWEEP_GLUE_STUDY if glue else SHRINK_SWEEP_PRETRAIN_STUDY)}
            study["overrides"] = {**(study.get("overrides") or {}), **shrink}
        path.write_text(yaml.safe_dump(sweep, sort_keys=False))

    def fill_placeholder(self, arg: str) -> str:
        """A checkpoint placeholder, replaced by the newest matching file written so far.

        ``...`` as a path part is any number of folders, ``<name>`` one folder, ``best.ckpt`` a
        monitored checkpoint (any but last.ckpt); a bare ``...`` or ``CKPT`` is any checkpoint
        under runs/, ``OUT`` a fresh output path.
        """
        if arg == "OUT":
            return str(self.repo / "out" / f"{len(self.outcomes)}.ckpt")
        pattern = self.placeholder_pattern(arg)
        if pattern is None:
            return arg
        found = [
            p
            for p in map(Path, glob.glob(str(self.repo / pattern), recursive=True))
            if p.is_file() and not (arg.endswith("best.ckpt") and p.name.startswith("last"))
        ]
        if not found:
            raise AssertionError(f"placeholder {arg!r} matched no file written by the commands documented before it")
        return str(max(found, key=lambda p: p.stat().st_mtime).relative_to(self.repo))

    @staticmethod
    def placeholder_pattern(arg: str) -> str | None:
        if arg in ("...", "CKPT"):
            return "runs/**/*.ckpt"
        parts = arg.split("/")
        if "..." not in parts and not any(re.fullmatch(r"<[^<>/]+>", part) for part in parts):
            return None
        parts = [
            "**" if part == "..." else "*" if re.fullmatch(r"<[^<>/]+>", part) else glob.escape(part) for part in parts
        ]
        if parts[-1] == "best.ckpt":
            parts[-1] = "*.ckpt"
        return "/".join(parts)

    def placeholders_unfilled(self, command: DocCommand) -> bool:
        """Whether ``command`` reads something under runs/ that no earlier command has written yet.

        That is a placeholder with nothing to point at, or a runs/ folder a report or an export
        reads (a sweep's ``--out`` folder is its output, not its input).
        """
        for arg in command.argv:
            pattern = self.placeholder_pattern(arg)
            if pattern is not None and not glob.glob(str(self.repo / pattern), recursive=True):
                return True
        reads_runs = command.subcommand.startswith("tiedemb.") and command.subcommand != "tiedemb.sweep"
        if reads_runs and any(
            arg.startswith("runs/") and self.placeholder_pattern(arg) is None and not (self.repo / arg).exists()
            for arg in command.argv
        ):
            return True
        # a path an earlier command of the same document names (writes) and nothing has written yet,
        # such as an export folder a later fit starts from
        earlier_commands = COMMANDS[: COMMANDS.index(command)] if command in COMMANDS else []
        named_before = {
            arg
            for earlier in earlier_commands
            if earlier.doc == command.doc
            for arg in earlier.argv[1:]
            if "/" in arg and not arg.startswith("-")
        }
        return any(
            arg in named_before and self.placeholder_pattern(arg) is None and not (self.repo / arg).exists()
            for arg in command.argv
        )  # a placeholder was checked above, by what it matches


def wandb_credentials() -> bool:
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
    )


#: Pages whose commands after their opening section run in test_docs_commands.py, beside README.md's,
#: not in test_docs_pages_commands.py. The two files run side by side on two workers, each in its own
#: workspace; shrunk, docs/experiments.md's opening (the two studies and their reports) takes about
#: 4 minutes, its later sections (the smoke sweep on WikiText-2) about 2, README.md's
#: commands with docs/usage.md's and docs/findings.md's (the command line in detail, the initial-loss
#: loop) about 3 and the other pages' well under 1. Split this way, neither file waits for the other;
#: and the smoke sweep README.md and docs/usage.md both show runs once, in one workspace.
BESIDE_README = {"docs/experiments.md", "docs/usage.md", "docs/findings.md"}


@functools.cache
def opening_lines(doc: str) -> int:
    """The last line of ``doc``'s opening: the line before its first ``##`` heading outside code."""
    in_code, number = False, 0
    for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), start=1):
        in_code = in_code != line.lstrip().startswith("```")
        if not in_code and line.startswith("## "):
            return number - 1
    return number


def runs_beside_readme(command: DocCommand) -> bool:
    return command.doc == "README.md" or (command.doc in BESIDE_README and command.line > opening_lines(command.doc))


def params(file: str) -> list[Any]:
    """pytest parameters for the commands ``file`` runs: ``"readme"`` (test_docs_commands.py:
    README.md's, then those of ``BESIDE_README`` after their opening) or ``"pages"``
    (test_docs_pages_commands.py: the rest of docs/*.md's), in document order."""
    if file not in ("readme", "pages"):
        raise ValueError(f"file must be 'readme' or 'pages', not {file!r}")
    return [as_param(c) for c in COMMANDS if runs_beside_readme(c) == (file == "readme")]


def check_command(command: DocCommand, workspace: Workspace) -> None:
    """Run ``command`` in ``workspace`` (or skip it, with the reason) and check what it left."""
    reason = workspace.reason_to_skip(command)
    if reason:
        pytest.skip(f"{command.text}: {reason}")
    outcome = workspace.run(command)
    result = outcome.result
    shown = (
        f"$ {shlex.join(result.args)}\n(took {outcome.seconds:.0f} s)\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    assert result.returncode == 0, shown
    assert "Traceback (most recent call last)" not in result.stderr, shown
    if command.subcommand == "fit" and not any(
        arg.startswith(("--print_config", "--print_completion")) for arg in command.argv
    ):
        written = [p for p in workspace.repo.glob("runs/**/last.ckpt") if p.stat().st_mtime >= outcome.started]
        assert written, f"fit wrote no last.ckpt\n{shown}"
        if "--trainer.logger=false" not in command.argv:  # the default loggers were on: both recorded the run
            wandb_runs = [
                p for p in workspace.repo.glob("runs/**/offline-run-*") if p.stat().st_mtime >= outcome.started
            ]
            csv_runs = [p for p in workspace.repo.glob("runs/**/hparams.yaml") if p.stat().st_mtime >= outcome.started]
            assert wandb_runs and csv_runs, f"the default loggers recorded nothing\n{shown}"
    if command.subcommand == "tiedemb.sweep":
        out = workspace.repo / command.argv[command.argv.index("--out") + 1]
        states = {p.parent.name: yaml.safe_load(p.read_text())["state"] for p in out.glob("**/status.json")}
        assert states and set(states.values()) == {"finished"}, states
    if command.subcommand == "tiedemb.report":
        folder = command.argv[command.argv.index(command.subcommand) + 1]
        assert (workspace.repo / folder / "report.md").stat().st_mtime >= outcome.started
