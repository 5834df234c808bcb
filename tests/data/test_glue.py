"""GlueData: both sources, the classic file quirks, batches, and every user mistake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from tiedemb.data.glue import TASKS, GlueData
from tiedemb.errors import UserError

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)


def write_mrpc(folder: Path, rows: list[str], name: str = "train.tsv", header: str = MRPC_HEADER) -> Path:
    """Write a classic MRPC file, byte-order mark included as in the real train and dev files."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\ufeff" + "\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def mrpc_row(label: str, first: str = "the man is sleeping .", second: str = "a man was sleeping .") -> str:
    return f"{label}\t1\t2\t{first}\t{second}"


def mnli_row(index: int, premise: str, hypothesis: str, gold: str) -> str:
    return f"{index}\t1\t1e\tfiction\t(x)\t(y)\t(x)\t(y)\t{premise}\t{hypothesis}\t{gold}\t{gold}"


@contextmanager
def raises_user_error(*fragments: str) -> Iterator[pytest.ExceptionInfo[UserError]]:
    """Expect one UserError whose message holds every fragment."""
    with pytest.raises(UserError) as info:
        yield info
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"


# --- MRPC from a classic folder (made up; the real one's sizes where it is present) -----------


@pytest.fixture(scope="module")
def mrpc(glue_dir: Path, wordpiece_dir: Path) -> GlueData:
    data = GlueData("mrpc", str(wordpiece_dir), data_dir=str(glue_dir), batch_size=16)
    data.setup(None)
    return data


def labels_in(path: Path) -> list[int]:
    """The ``Quality`` column of a classic MRPC file, counted by hand."""
    return [int(line.split("\t")[0]) for line in path.read_text(encoding="utf-8-sig").splitlines()[1:]]


def test_mrpc_sizes_labels_and_majority_accuracy(mrpc: GlueData, glue_dir: Path, wordpiece_dir: Path) -> None:
    pieces = len(json.loads((wordpiece_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])
    assert (mrpc.num_labels, mrpc.vocab_size, mrpc.pad_token_id) == (2, pieces, 0)
    assert mrpc.val_split_names == ["validation"] and mrpc.predict_split_names == ["test"]
    train, dev, test = (mrpc.split_dataset(split) for split in ("train", "validation", "test"))
    sizes = [
        len((glue_dir / "MRPC" / name).read_text(encoding="utf-8").splitlines()) - 1
        for name in ("train.tsv", "dev.tsv", "test.tsv")
    ]
    assert [len(train), len(dev), len(test)] == sizes
    assert list(train["labels"]) == labels_in(glue_dir / "MRPC" / "train.tsv")  # the byte-order mark is no label
    assert list(dev["labels"]) == labels_in(glue_dir / "MRPC" / "dev.tsv")
    assert set(test["labels"]) == {-1}
    assert list(test["idx"]) == list(range(sizes[2]))  # the file's `index` column
    assert list(dev["idx"]) == list(range(sizes[1]))


def test_mrpc_text_keeps_bare_quotes(mrpc: GlueData, glue_dir: Path) -> None:
    # a row holding `he said " ... " today`; quoting on would swallow the quote or rows
    lines = (glue_dir / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:]
    row = next(number for number, line in enumerate(lines) if '"' in line)
    first, second = lines[row].split("\t")[3:5]
    text = mrpc.tokenizer.decode(mrpc.split_dataset("validation")[row]["input_ids"])
    assert text == f"[CLS] {first} [SEP] {second} [SEP]"
    assert text.startswith('[CLS] he said " ')


def test_mrpc_batches_are_padded_pairs(mrpc: GlueData) -> None:
    batch = next(iter(mrpc.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "idx"}
    assert all(value.dtype == torch.long for value in batch.values())
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["token_type_ids"].shape
    assert batch["labels"].shape == batch["idx"].shape == (16,)
    lengths = batch["attention_mask"].sum(dim=1)
    assert batch["input_ids"].shape[1] == lengths.max() <= 128  # padded to the longest only
    assert lengths.min() < lengths.max()  # so some rows are padded
    padding = batch["attention_mask"] == 0
    assert (batch["input_ids"][padding] == mrpc.pad_token_id).all()
    assert (batch["token_type_ids"][padding] == 0).all()
    assert (batch["token_type_ids"].amax(dim=1) == 1).all()  # every row has a second sentence
    assert (batch["input_ids"][:, 0] == mrpc.tokenizer.cls_token_id).all()
    loaders = mrpc.val_dataloader()
    assert len(loaders) == 1 and sum(len(b["labels"]) for b in loaders[0]) == len(mrpc.split_dataset("validation"))
    assert len(mrpc.test_dataloader()) == 1
    predict = next(iter(mrpc.predict_dataloader()[0]))
    assert (predict["labels"] == -1).all() and predict["idx"].tolist() == list(range(16))


def test_the_real_mrpc_folder_reads_whole(shared_data: Path, bert_tokenizer_dir: Path) -> None:
    """The real files' sizes, class balance and bare quotes (the made-up folder copies their quirks)."""
    data = GlueData("mrpc", str(bert_tokenizer_dir), data_dir=str(shared_data / "glue"))
    assert data.vocab_size == 30522
    train, dev, test = (data.split_dataset(split) for split in ("train", "validation", "test"))
    assert (len(train), len(dev), len(test)) == (3667, 408, 1725)
    assert round(sum(dev["labels"]) / len(dev), 3) == 0.684
    assert list(test["idx"]) == list(range(1725))
    # dev line 2: `" The foodservice pie business ...`; quoting on would swallow the quote or rows
    text = data.tokenizer.decode(dev[0]["input_ids"])
    assert text.startswith("[CLS] he said the foodservice pie business")
    assert '[SEP] " the foodservice pie business' in text


def test_data_dir_may_name_the_task_folder_or_its_parent(glue_dir: Path, wordpiece_dir: Path) -> None:
    for data_dir in (glue_dir, glue_dir / "MRPC"):
        data = GlueData("mrpc", str(wordpiece_dir), data_dir=str(data_dir))
        assert data.val_split_names == ["validation"] and data.predict_split_names == ["test"]


def test_max_length_truncates_and_max_train_samples_limits(glue_dir: Path, wordpiece_dir: Path) -> None:
    data = GlueData("mrpc", str(wordpiece_dir), data_dir=str(glue_dir), max_length=16, max_train_samples=50)
    train = data.split_dataset("train")
    assert len(train) == 50
    assert max(len(ids) for ids in train["input_ids"]) == 16


# --- MNLI from a 12-column folder ----------------------------------------------------------------


def test_mnli_labels_come_from_the_last_column(glue_dir: Path, wordpiece_dir: Path) -> None:
    data = GlueData("mnli", str(wordpiece_dir), data_dir=str(glue_dir / "MNLI"))
    assert data.val_split_names == ["validation_matched"]  # no dev_mismatched.tsv in the folder
    assert data.predict_split_names == []
    data.setup("fit")
    dev = data.split_dataset("validation_matched")
    lines = (glue_dir / "MNLI" / "dev_matched.tsv").read_text(encoding="utf-8").splitlines()[1:]
    gold = [line.split("\t")[-1] for line in lines]
    names = TASKS["mnli"].label_names
    assert [names[label] for label in dev["labels"]] == gold
    assert [dev[row]["labels"] for row in range(3)] == [0, 1, 2]  # entailment, neutral, contradiction
    assert gold[:3] == ["entailment", "neutral", "contradiction"]
    premise = lines[0].split("\t")[8]
    assert data.tokenizer.decode(dev[0]["input_ids"]).startswith("[CLS] " + premise.lower()[:30])
    train_lines = (glue_dir / "MNLI" / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert len(data.split_dataset("train")) == len(train_lines) - 1
    assert [len(loader.dataset) for loader in data.val_dataloader()] == [len(lines)]
    with raises_user_error("test_matched.tsv", "test_mismatched.tsv"):
        data.setup("predict")


# --- the hub --------------------------------------------------------------------------------------


def write_hub_folder(folder: Path, train_labels: tuple[int, ...] = (1, 0, 1), second: str = "sentence2") -> Path:
    """A local folder laid out like ``nyu-mll/glue`` (parquet per config), which ``datasets`` loads as the
    hub's; ``second`` names the second text column. Its test split has no label column (the hub's
    holds -1s): unlabelled splits get -1 whatever they hold."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "mrpc").mkdir(parents=True)
    for split, labels in (("train", train_labels), ("validation", [0, 1, 1]), ("test", None)):
        table = {"sentence1": ["a man .", "a cat .", "the dog ."], second: ["a dog .", "a cat .", "no"]}
        table |= {"label": list(labels)} if labels is not None else {}
        table |= {"idx": [0, 1, 2]}
        pq.write_table(pa.table(table), folder / "mrpc" / f"{split}-00000-of-00001.parquet")
    splits = "".join(f"  - split: {split}\n    path: mrpc/{split}-*\n" for split in ("train", "validation", "test"))
    (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: mrpc\n  data_files:\n{splits}---\n")
    return folder


def test_hub_layout_from_a_local_folder(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    """The hub path end to end, on a local folder laid out like ``nyu-mll/glue``."""
    data = GlueData("mrpc", str(tiny_tokenizer_dir), hub_dataset=str(write_hub_folder(tmp_path)), max_train_samples=2)
    data.prepare_data()
    data.setup(None)
    assert data.split_dataset("train")["labels"] == [1, 0]
    assert data.split_dataset("validation")["labels"] == [0, 1, 1]
    assert data.split_dataset("test")["labels"] == [-1, -1, -1]
    assert next(iter(data.predict_dataloader()[0]))["idx"].tolist() == [0, 1, 2]


def test_task_table_is_consistent() -> None:
    assert set(TASKS) == {"mnli", "mrpc"}
    for name, task in TASKS.items():
        assert task.name == name
        assert set(task.submission_files) == set(task.test_splits)
        assert set(task.classic.split_files) == set(task.splits)
        assert len(task.classic.label_values) == len(task.label_names)
        assert len(task.classic.text_columns) == len(task.text_columns)
    assert TASKS["mnli"].submission_files == {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}
    assert TASKS["mrpc"].label_names == ("not_equivalent", "equivalent")


# --- user mistakes ---------------------------------------------------------------------------------


def test_unknown_task_lists_the_valid_ones(tiny_tokenizer_dir: Path) -> None:
    with raises_user_error("'sts'", "mnli", "mrpc"):
        GlueData("sts", str(tiny_tokenizer_dir))


def test_missing_data_dir_names_the_path(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    with raises_user_error(str(tmp_path / "nowhere")):
        GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path / "nowhere"))
    with raises_user_error(str(tmp_path / "MRPC"), "train.tsv"):
        GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path))


def test_missing_train_file_names_the_expected_path(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    write_mrpc(tmp_path / "MRPC", [mrpc_row("1")], name="dev.tsv")
    data = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path))
    with raises_user_error(str(tmp_path / "MRPC" / "train.tsv")):
        data.setup("fit")
    with raises_user_error(str(tmp_path / "MRPC" / "test.tsv")):
        data.setup("predict")


def test_missing_dev_file_names_the_expected_path(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    write_mrpc(tmp_path, [mrpc_row("1")])
    data = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path))
    with raises_user_error(str(tmp_path / "dev.tsv")):
        data.setup("validate")


def test_bad_mrpc_label_names_file_and_line(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    rows = [mrpc_row(str(number % 2)) for number in range(20)]
    rows[10] = mrpc_row("7")  # the 11th example
    write_mrpc(tmp_path / "MRPC", rows)
    write_mrpc(tmp_path / "MRPC", rows[:2], name="dev.tsv")
    data = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path))
    with raises_user_error("train.tsv", "row 11", "'7'"):
        data.setup("fit")


def test_bad_mnli_label_names_file_and_line(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    lines = [MNLI_HEADER, mnli_row(0, "a man .", "a man .", "entailment"), mnli_row(1, "a man .", "a cat .", "-")]
    (tmp_path / "dev_matched.tsv").write_text("\n".join(lines) + "\n")
    data = GlueData("mnli", str(tiny_tokenizer_dir), data_dir=str(tmp_path))
    with raises_user_error("dev_matched.tsv", "row 2", "'-'"):
        data.setup("validate")


def test_wrong_task_file_is_named(tmp_path: Path, glue_dir: Path, tiny_tokenizer_dir: Path) -> None:
    data = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(glue_dir / "MNLI"))
    with raises_user_error("train.tsv", "#1 String"):
        data.split_dataset("train")


def test_empty_splits_are_named(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    write_mrpc(tmp_path, [mrpc_row("1")])
    write_mrpc(tmp_path, [], name="dev.tsv")
    data = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path))
    with raises_user_error(str(tmp_path / "dev.tsv"), "no examples"):
        data.setup("validate")


def test_unreachable_hub_fails_with_advice(monkeypatch: pytest.MonkeyPatch, tiny_tokenizer_dir: Path) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    data = GlueData("mrpc", str(tiny_tokenizer_dir))
    assert data.val_split_names == ["validation"] and data.predict_split_names == ["test"]
    with raises_user_error("nyu-mll/glue", "data_dir", "HF_HUB_OFFLINE"):
        data.prepare_data()


def test_offline_mode_fails_without_a_cached_copy(monkeypatch: pytest.MonkeyPatch, tiny_tokenizer_dir: Path) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    data = GlueData("mrpc", str(tiny_tokenizer_dir), hub_dataset="tiedemb-tests/no-such-glue")
    with raises_user_error("tiedemb-tests/no-such-glue", "data_dir"):
        data.setup("fit")


@pytest.mark.parametrize(
    "name, text, fragments",
    [
        ("train.tsv", "", ["train.tsv: Empty CSV file"]),
        (
            "train.tsv",
            f"{MRPC_HEADER}\n{mrpc_row('1')}\n1\t2\n",
            ["train.tsv: CSV parse error: Expected 5 columns, got 2"],
        ),
        (
            "test.tsv",
            "index\t#1 ID\t#2 ID\t#1 String\t#2 String\nx\t1\t2\ta\tb\n",
            ["test.tsv: In CSV column #0: CSV conversion error to int64: invalid value 'x'"],
        ),
    ],
)
def test_a_broken_classic_file_is_named_with_the_problem(
    tmp_path: Path, tiny_tokenizer_dir: Path, name: str, text: str, fragments: list[str]
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    data = GlueData("mrpc", str(tiny_tokenizer_dir), data_dir=str(tmp_path))
    with raises_user_error(str(tmp_path / name), *fragments):
        data.raw_split("train" if name == "train.tsv" else "test")
