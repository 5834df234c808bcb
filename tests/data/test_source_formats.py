"""Each source's own format converted to the files the studies read (tiedemb.data.preparing).

The inputs are small files in the sources' formats (tests/data_sources.py); the outputs' sha256 are
pinned, so a change to a conversion shows here as a changed checksum. Where the real files exist
(../shared/data), the conversion of Brown's opening sentences is checked against the real text.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
from data_sources import BROWN, MNLI, MRPC, WIKITEXT, hub_tables

from tiedemb.data.glue import read_split
from tiedemb.data.glue_tasks import TASKS
from tiedemb.data.preparing import brown_files, brown_words, write_brown, write_glue, write_wikitext
from tiedemb.errors import UserError

BROWN_SHA256 = "b4ab91c2c12f7641dbb6e7da67314c7c688fc798ea73922858ad0aeaa0d15d05"
WIKITEXT_SHA256 = "302768da8716354f1194b38c4e9658fb1007f4edfc8a52adafb8d33c3b0b7b09"
GLUE_SHA256 = {
    "MRPC/train.tsv": "218b6e7a5e0d7a4fe88613831955fd29fb3d3f9d8e233170e66fa603b4e30f1a",
    "MRPC/dev.tsv": "56b449dff81a541dcb2dcdcbb86483f647c3df900908fa4ee902b0c62292081a",
    "MRPC/test.tsv": "1e00efc52f21003b18404ffadede1c73b955921a38279a5ae5ebe9a500b462b6",
    "MNLI/train.tsv": "88c6c0122e87bbe57b6398a0ac936f6d343d6e14538884358aca3d812d427afa",
    "MNLI/dev_matched.tsv": "4ea9669a06c85ec004e8f90c7c127a3b7894a4736ebbb8c72c572385c38248f0",
    "MNLI/dev_mismatched.tsv": "cbc04d3ee18127b7f53acde7254d81585230a469500914c4214891366866c6aa",
    "MNLI/test_matched.tsv": "9ceb01a824310481f58d6b0495551010665ba710204664b0bd3157d39054cae7",
    "MNLI/test_mismatched.tsv": "e2e835e644230b23357f9a86811084cb5e51dd9bcab06861b3cdcf80d51799ae",
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_nltk_tagged_brown_files_become_one_document_a_line(tmp_path):
    files = brown_files(BROWN, tmp_path)
    assert [path.name for path in files] == ["ca01", "ca02", "cj01"]  # cats.txt and README are not documents
    out = tmp_path / "brown.txt"
    assert write_brown(files, out) == 3
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 4
    assert lines[1] == (
        'Austin , Texas -- Committee approval of Gov. Price Daniel\'s " abandoned property " act seemed certain '
        "Thursday despite the adamant protests of Texas bankers ."
    )
    # a word that holds "/" loses only its tag; inch marks stay, the closing quote after them is "
    assert lines[2].startswith("Cut 12 pieces 1/2'' \" sq. and 5-3/4'' \" long ;")
    assert sha256(out) == BROWN_SHA256


def test_brown_from_nltks_zip_is_the_same_text(tmp_path):
    archive = tmp_path / "brown.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for path in sorted(BROWN.iterdir()):
            packed.write(path, f"brown/{path.name}")  # NLTK's zip: the files under brown/
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    out = tmp_path / "brown.txt"
    write_brown(brown_files(archive, unpacked), out)
    assert sha256(out) == BROWN_SHA256


def test_tags_come_off_at_the_last_slash_and_tex_quotes_become_plain_ones():
    words = brown_words("\tThe/at 1/2/cd ``/`` no/at ''/'' ./.\n\n\tbare\n")
    assert words == ["The", "1/2", '"', "no", '"', ".", "bare"]


def test_a_folder_without_brown_files_is_refused(tmp_path):
    (tmp_path / "README").write_text("not Brown\n")
    with pytest.raises(UserError, match="holds none of NLTK's tagged Brown files"):
        brown_files(tmp_path, tmp_path)


def test_brown_conversion_matches_the_real_text(tmp_path, shared_data):
    """The fixture's ca01 and ca02 are the real files' opening sentences: converted, they open the real text's lines."""
    out = tmp_path / "brown.txt"
    write_brown(brown_files(BROWN, tmp_path), out)
    converted = out.read_text(encoding="utf-8").splitlines()
    with (shared_data / "text" / "brown.txt").open(encoding="utf-8") as real:
        first, second = real.readline(), real.readline()
    assert first.startswith(converted[0] + " ") and second.startswith(converted[1] + " ")


def test_wikitext_rows_become_the_original_lines(tmp_path):
    splits = hub_tables(WIKITEXT)
    out = tmp_path / "wikitext-2-valid.txt"
    assert write_wikitext(splits["validation"].column("text").to_pylist(), out) == len(WIKITEXT["validation"])
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[:4] == [" ", " = Homarus gammarus = ", " ", lines[3]] and "<unk>" in lines[3]
    assert sha256(out) == WIKITEXT_SHA256


@pytest.mark.parametrize("name, rows", [("mrpc", MRPC), ("mnli", MNLI)])
def test_glue_splits_become_classic_files_the_glue_reader_reads_back(tmp_path, name, rows):
    task = TASKS[name]
    folder = tmp_path / "glue" / task.classic.folder
    written = write_glue(task, hub_tables(rows), folder)
    assert set(written) == set(task.classic.split_files.values())
    for split in task.splits:
        path = folder / task.classic.split_files[split]
        labelled = split not in task.test_splits
        read = read_split(path, task, split)
        for text in task.text_columns:
            assert read[text] == [value.replace("\t", " ") for value in rows[split][text]]
        assert read["label"] == rows[split]["label"]
        if not labelled:
            assert read["idx"] == rows[split]["idx"]
        assert sha256(path) == GLUE_SHA256[f"{task.classic.folder}/{path.name}"], path.name
