"""``tiedemb data prepare``: every data set downloaded, with the downloaders replaced by ones that hand
over files in each source's format (no network), written with pinned checksums; the refusals; and a
shipped study run from a clean copy of the repository with a ``data/`` folder made this way."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml
from data_sources import BROWN, MNLI, MRPC, TOKENIZER, WIKITEXT, write_made_up_brown

from tiedemb.data.preparing import ENTRIES
from tiedemb.data_command import main

ROOT = Path(__file__).resolve().parents[1]

PINNED = {
    "text/brown.txt": "b4ab91c2c12f7641dbb6e7da67314c7c688fc798ea73922858ad0aeaa0d15d05",
    "text/wikitext-2-valid.txt": "302768da8716354f1194b38c4e9658fb1007f4edfc8a52adafb8d33c3b0b7b09",
    "glue/MRPC/dev.tsv": "56b449dff81a541dcb2dcdcbb86483f647c3df900908fa4ee902b0c62292081a",
    "glue/MRPC/test.tsv": "1e00efc52f21003b18404ffadede1c73b955921a38279a5ae5ebe9a500b462b6",
    "glue/MRPC/train.tsv": "218b6e7a5e0d7a4fe88613831955fd29fb3d3f9d8e233170e66fa603b4e30f1a",
    "glue/MNLI/dev_matched.tsv": "4ea9669a06c85ec004e8f90c7c127a3b7894a4736ebbb8c72c572385c38248f0",
    "glue/MNLI/dev_mismatched.tsv": "cbc04d3ee18127b7f53acde7254d81585230a469500914c4214891366866c6aa",
    "glue/MNLI/test_matched.tsv": "9ceb01a824310481f58d6b0495551010665ba710204664b0bd3157d39054cae7",
    "glue/MNLI/test_mismatched.tsv": "e2e835e644230b23357f9a86811084cb5e51dd9bcab06861b3cdcf80d51799ae",
    "glue/MNLI/train.tsv": "88c6c0122e87bbe57b6398a0ac936f6d343d6e14538884358aca3d812d427afa",
    "tokenizers/bert-base-uncased/tokenizer_config.json": (
        "b1789919bf424f42be989db8d46cde6da31f7fbe51d417ab847fe5070802cf38"
    ),
    "tokenizers/bert-base-uncased/vocab.txt": "23684edde65ea764c2165b20fd195629b97dd28a59e07bfd7417bd76b8575315",
}
"""sha256 of every file ``data prepare`` writes from the fixtures; the tokenizer's files are copied byte
for byte, so theirs are the fixture's own."""


def checksums(data: Path) -> dict[str, str]:
    lines = (data / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines)}


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "unknown data name 'nope'; known: brown, wikitext-2, mrpc, mnli, bert-base-uncased"),
        ([], "name the data to prepare: brown, wikitext-2, mrpc, mnli, bert-base-uncased"),
    ],
    ids=["unknown", "no-name"],
)
def test_what_it_cannot_do_is_refused_in_one_line_with_nothing_written(tmp_path, capsys, args, message):
    assert main(["prepare", *args, "--dir", str(tmp_path / "data")]) == 2
    shown = capsys.readouterr()
    assert shown.err.splitlines() == ["error: " + message]
    assert list(tmp_path.iterdir()) == []


def test_brown_without_nltk_is_refused_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk", None)  # what an environment without nltk imports
    assert main(["prepare", "wikitext-2", "brown", "--dir", str(tmp_path / "data")]) == 2
    assert capsys.readouterr().err == (
        "error: preparing brown downloads it with NLTK, which is not installed: pip install 'tiedemb[data]'\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def downloaders(monkeypatch, tmp_path):
    """NLTK's downloader, ``datasets.load_dataset`` and ``huggingface_hub.snapshot_download`` replaced by
    ones that hand over the fixtures and record what they were asked for (``asked``); the hub probe kept
    offline. A test may change what they hand over (``served``)."""
    import datasets
    import huggingface_hub

    asked = []
    served = {
        "brown": BROWN,
        ("Salesforce/wikitext", "wikitext-2-v1"): WIKITEXT,
        ("nyu-mll/glue", "mrpc"): MRPC,
        ("nyu-mll/glue", "mnli"): MNLI,
    }

    def download(name, download_dir, quiet, raise_on_error):
        asked.append(("nltk", name))
        shutil.copytree(served[name], Path(download_dir) / "corpora" / "brown")
        return True

    def load_dataset(repo, config):
        asked.append(("datasets", repo, config))
        splits = served[(repo, config)]
        return datasets.DatasetDict(
            {
                split: datasets.Dataset.from_dict({"text": rows} if isinstance(rows, list) else rows)
                for split, rows in splits.items()
            }
        )

    def snapshot_download(repo, allow_patterns):
        asked.append(("hub", repo, tuple(allow_patterns)))
        return str(TOKENIZER)

    monkeypatch.setitem(sys.modules, "nltk", types.SimpleNamespace(download=download))
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no probe of the hub; the replaced loaders ignore it
    return types.SimpleNamespace(asked=asked, served=served)


def test_a_download_goes_through_nltk_datasets_and_the_hub_and_writes_the_pinned_files(tmp_path, capsys, downloaders):
    data = tmp_path / "data"
    assert main(["prepare", *ENTRIES, "--dir", str(data)]) == 0
    shown = capsys.readouterr().out
    assert all(f"{name}: {data / location} (" in shown for name, location in ENTRIES.items())
    assert downloaders.asked == [
        ("nltk", "brown"),
        ("datasets", "Salesforce/wikitext", "wikitext-2-v1"),
        ("datasets", "nyu-mll/glue", "mrpc"),
        ("datasets", "nyu-mll/glue", "mnli"),
        (
            "hub",
            "bert-base-uncased",
            ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"),
        ),
    ]
    assert checksums(data) == PINNED
    written = {path.relative_to(data).as_posix() for path in data.rglob("*") if path.is_file()}
    assert written == {*PINNED, "SHA256SUMS"}  # no staging folder or download left behind
    for name, digest in PINNED.items():
        assert hashlib.sha256((data / name).read_bytes()).hexdigest() == digest, name


def test_the_prepared_tokenizer_loads_as_tiedemb_loads_one(tmp_path, downloaders):
    from tiedemb.data.tokenizers import load_tokenizer

    data = tmp_path / "data"
    assert main(["prepare", "bert-base-uncased", "--dir", str(data)]) == 0
    tokenizer = load_tokenizer(data / "tokenizers" / "bert-base-uncased")
    assert tokenizer("The man is sleeping!")["input_ids"] == [2, 7, 8, 14, 17, 22, 3]


def test_what_is_there_is_left_alone_and_force_makes_it_again(tmp_path, capsys, downloaders):
    data = tmp_path / "data"
    assert main(["prepare", "brown", "--dir", str(data)]) == 0
    brown = data / "text" / "brown.txt"
    brown.write_text("edited\n")
    before = (data / "SHA256SUMS").read_text()
    capsys.readouterr()
    assert main(["prepare", "brown", "--dir", str(data)]) == 0
    assert capsys.readouterr().out == f"brown: {brown} is there (--force makes it again)\n"
    assert brown.read_text() == "edited\n" and (data / "SHA256SUMS").read_text() == before
    assert main(["prepare", "brown", "--dir", str(data), "--force"]) == 0
    assert hashlib.sha256(brown.read_bytes()).hexdigest() == PINNED["text/brown.txt"]
    assert sorted(path.name for path in data.iterdir()) == ["SHA256SUMS", "text"]


def test_a_failed_download_is_one_line_and_leaves_nothing(tmp_path, capsys, downloaders, monkeypatch):
    import datasets

    def unreachable(repo, config):
        raise ConnectionError(f"cannot reach {repo}\nretry later")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    assert main(["prepare", "mrpc", "--dir", str(tmp_path / "data")]) == 2
    assert capsys.readouterr().err == (
        "error: could not fetch nyu-mll/glue mrpc from the hub (the hub cannot be reached, or HF_HUB_OFFLINE is "
        "set): cannot reach nyu-mll/glue; elsewhere, prepare it there and copy the data folder here\n"
    )
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the real command line


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TIEDEMB_DEBUG")}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env={**environment, **env}, capture_output=True, text=True, timeout=600
    )


def clean_copy(folder: Path) -> Path:
    """The repository's tracked parts a user's clone has, with no ../shared beside it."""
    repo = folder / "clone"
    repo.mkdir(parents=True)
    shutil.copy(ROOT / "main.py", repo / "main.py")
    for name in ("tiedemb", "configs"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    assert not (folder / "shared").exists()
    return repo


@pytest.mark.end_to_end
def test_the_command_line_refuses_an_unknown_name_in_one_line(tmp_path):
    repo = clean_copy(tmp_path)
    result = run(["-m", "tiedemb", "data", "prepare", "brwon"], repo)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: unknown data name 'brwon'; known: brown, wikitext-2, mrpc, mnli, bert-base-uncased"
    ]
    assert not (repo / "data").exists()


@pytest.mark.end_to_end
def test_a_shipped_study_runs_from_a_clean_copy_with_the_prepared_data(tmp_path, downloaders):
    """The tied study's first cell, two steps, in a copy of the repository without ../shared: its text
    comes from ``data prepare`` (a made-up Brown in NLTK's format, made-up WikiText rows as the hub's)."""
    repo = clean_copy(tmp_path)
    # 160 documents: the study validates every 50 steps, which an epoch of its training text must hold
    brown = write_made_up_brown(tmp_path / "sources" / "brown", documents=160)
    paragraphs = [f" = Made up {number} = \n" if number % 10 == 0 else "" for number in range(60)]
    paragraphs = [row or " ".join(["the river city of the king", "<unk>"] * 12) + " . \n" for row in paragraphs]
    downloaders.served["brown"] = brown
    downloaders.served[("Salesforce/wikitext", "wikitext-2-v1")] = {"validation": paragraphs}
    assert main(["prepare", "brown", "wikitext-2", "--dir", str(repo / "data")]) == 0  # in this process
    # the shipped study, two steps long
    study = yaml.safe_load((repo / "configs" / "sweeps" / "repro_tied_cpu.yaml").read_text())
    study["overrides"]["trainer.max_steps"] = 2
    (repo / "configs" / "sweeps" / "short.yaml").write_text(yaml.safe_dump(study))
    swept = run(
        ["-m", "tiedemb", "sweep", "configs/sweeps/short.yaml", "--out", "runs/repro_tied", "--cell", "0"],
        repo,
        WANDB_MODE="offline",
    )
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    (cell,) = (repo / "runs" / "repro_tied").glob("**/cell.json")
    assert json.loads((cell.parent / "status.json").read_text())["state"] == "finished"
    resolved = yaml.safe_load((cell.parent / "config.yaml").read_text())
    assert resolved["data"]["init_args"]["train_files"] == ["data/text/brown.txt"]
    assert resolved["data"]["init_args"]["ood_val_files"] == ["data/text/wikitext-2-valid.txt"]
