"""A data file the shipped configs read that is missing is reported in one line naming the command that
makes it: by the text, GLUE and tokenizer loaders and by a sweep's ``requires``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiedemb.data.preparing import entry_for, prepare_hint
from tiedemb.errors import UserError


@pytest.mark.parametrize(
    "path, name",
    [
        ("data/text/brown.txt", "brown"),
        ("./data/text/wikitext-2-valid.txt", "wikitext-2"),
        ("/home/me/tiedemb/data/glue/MRPC", "mrpc"),
        ("data/glue/MNLI/dev_mismatched.tsv", "mnli"),
        ("data/tokenizers/bert-base-uncased", "bert-base-uncased"),
        ("my/brown.txt", None),  # a text of the user's own, not the prepared one
        ("text/brown.txt", None),
        ("data/glue", None),
        ("data/cache/text", None),
    ],
)
def test_a_path_is_matched_to_the_data_set_that_provides_it(path, name):
    assert entry_for(path) == name
    assert prepare_hint(path) == (f" (`tiedemb data prepare {name}` makes it)" if name else "")


@pytest.fixture
def empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_missing_text_file_names_the_command(empty_folder):
    from tiedemb.data.tokenizers import expand_files

    with pytest.raises(UserError) as raised:
        expand_files(["data/text/brown.txt"], "train")
    assert str(raised.value) == (
        "train file 'data/text/brown.txt' does not exist (`tiedemb data prepare brown` makes it)"
    )
    with pytest.raises(UserError) as raised:
        expand_files(["corpus/mine.txt"], "train")
    assert str(raised.value) == "train file 'corpus/mine.txt' does not exist"


def test_a_missing_glue_folder_or_file_names_the_command(empty_folder):
    from tiedemb.data.glue import find_task_dir, read_split
    from tiedemb.data.glue_tasks import TASKS

    mrpc, mnli = TASKS["mrpc"], TASKS["mnli"]
    hint = r"\(`tiedemb data prepare mrpc` makes it\)$"
    with pytest.raises(UserError, match=r"^data_dir 'data/glue' does not exist .*" + hint):
        find_task_dir("data/glue", mrpc)
    (empty_folder / "data" / "glue").mkdir(parents=True)
    with pytest.raises(UserError, match=r"holds no MNLI data: .* \(`tiedemb data prepare mnli` makes it\)$"):
        find_task_dir("data/glue", mnli)
    with pytest.raises(UserError, match=r"but it does not exist \(`tiedemb data prepare mnli` makes it\)$"):
        missing = Path("data/glue/MNLI/dev_mismatched.tsv")
        read_split(missing, mnli, "validation_mismatched")


def test_a_missing_tokenizer_folder_names_the_command(empty_folder):
    from tiedemb.data.tokenizers import load_tokenizer

    with pytest.raises(UserError) as raised:
        load_tokenizer("data/tokenizers/bert-base-uncased")
    assert str(raised.value) == (
        "tokenizer directory 'data/tokenizers/bert-base-uncased' does not exist "
        "(`tiedemb data prepare bert-base-uncased` makes it)"
    )


def test_a_sweep_study_skipped_for_missing_data_says_the_command(empty_folder):
    from tiedemb.experiments.sweep_file import load_sweep

    configs = Path(__file__).resolve().parents[2] / "configs"
    sweep = load_sweep(configs / "sweeps" / "repro_width_cpu.yaml", workdir=empty_folder)
    reasons = {study.name: study.skipped_because for study in sweep.studies}
    assert reasons["pretrain"] == (
        f"required path 'data/text/brown.txt' is absent (relative to {str(empty_folder)!r}) "
        "(`tiedemb data prepare brown` makes it)"
    )
    assert reasons["mrpc"].endswith("(`tiedemb data prepare mrpc` makes it)")
