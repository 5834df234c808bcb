"""Made-up data in the layout of ``../shared/data`` and of what ``tiedemb data prepare`` writes under
``data/``, small enough to build in a second.

``write_stand_in_data(root)`` writes ``root/glue/{MRPC,MNLI}`` (the classic ``glue_data`` files),
``root/text/{wikitext-2-valid,brown}.txt``, ``root/tokenizers/brown-wordpiece-8192`` and
``root/tokenizers/bert-base-uncased`` (WordPiece tokenizers
trained on the made-up text, saved as BERT's is): every path a test or a documented
command names under ``data/`` exists, so they run in a clone that lacks the real data.
The files keep the real ones' quirks (byte-order marks, bare ``"`` characters, MRPC's unlabelled
test split with ``index`` first, MNLI's label in the last of 12 columns, WikiText's ``= Title =``
headings and ``<unk>``), since those are what the loaders must get right.
"""

from __future__ import annotations

import random
from pathlib import Path

WORDS = (
    "the a an of to in on at by for with from as is was are were be been has had have it its this that "
    "these those he she they we you i his her their our who which what when where why how not no yes "
    "river city king queen army ship song album game film team season league war church school house "
    "road bridge station island valley mountain forest lake coast north south east west new old first "
    "last early late great small large long short high low young ancient modern famous local royal "
    "built played wrote sang won lost moved opened closed named called found became remained returned "
    "began ended signed joined led held released recorded published designed attacked defended said "
    "company market price share bank stock profit report deal court law police officer state government"
).split()
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
MNLI_LABELS = ("entailment", "neutral", "contradiction")
MRPC_SIZES = {"train": 96, "dev": 48, "test": 24}
"""Rows per split; about two thirds of the labelled pairs are paraphrases, as in the real MRPC."""
TEXT_TITLE = "= Made Up River ="
"""The made-up WikiText's first line (after its byte-order mark)."""


def sentence(rng: random.Random, low: int = 6, high: int = 16) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high)))


def write_mrpc(folder: Path) -> Path:
    """``folder/MRPC/{train,dev,test}.tsv``: a paraphrase repeats its first sentence's words, the
    others draw new ones; some sentences hold bare ``"`` characters. Returns ``folder``."""
    rng = random.Random(0)
    task = folder / "MRPC"
    task.mkdir(parents=True, exist_ok=True)
    for split, size in MRPC_SIZES.items():
        rows = []
        for i in range(size):
            first = sentence(rng)
            if i % 7 == 3:
                first = f'he said " {first} " today'
            label = int(i % 3 != 0)
            second = " ".join(first.split()[::-1]) if label else sentence(rng)
            leading = i if split == "test" else label
            rows.append(f"{leading}\t{1000 + 2 * i}\t{1001 + 2 * i}\t{first}\t{second}")
        header = MRPC_HEADER.replace("Quality", "index") if split == "test" else MRPC_HEADER
        bom = "" if split == "test" else "\ufeff"  # as in the real files: train and dev carry one
        (task / f"{split}.tsv").write_text(bom + "\n".join([header, *rows]) + "\n", encoding="utf-8")
    return folder


def write_mnli(folder: Path) -> Path:
    """``folder/MNLI/{train,dev_matched}.tsv``: 12 columns, the label in the last. Returns ``folder``."""
    rng = random.Random(1)
    task = folder / "MNLI"
    task.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", 24), ("dev_matched", 12)):
        rows = []
        for i in range(size):
            label = MNLI_LABELS[i % 3]
            first, second = sentence(rng), sentence(rng, 4, 9)
            parses = [f"( {first} )", f"( {second} )", f"(ROOT {first})", f"(ROOT {second})"]
            rows.append(
                "\t".join([str(i), str(100 + i), f"{100 + i}e", "fiction", *parses, first, second, label, label])
            )
        (task / f"{split}.tsv").write_text("\n".join([MNLI_HEADER, *rows]) + "\n", encoding="utf-8")
    return folder


def write_text(path: Path, paragraphs: int = 240, seed: int = 2) -> Path:
    """WikiText-2's shape: a byte-order mark, ``= Title =`` headings, blank lines between
    paragraphs, rare words replaced by ``<unk>``."""
    rng = random.Random(seed)
    lines = [TEXT_TITLE, ""]
    for number in range(paragraphs):
        if number and number % 12 == 0:
            lines += [f" = = {sentence(rng, 2, 4).title()} = = ", ""]
        words = [w if rng.random() > 0.02 else "<unk>" for w in sentence(rng, 30, 70).split()]
        lines += [" " + " ".join(words) + " . ", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_wordpiece_tokenizer(folder: Path, texts: list[Path], vocab_size: int = 400) -> Path:
    """A lower-casing WordPiece tokenizer with BERT's special tokens and template, trained on
    ``texts`` with the ``tokenizers`` library and saved as ``transformers`` saves BERT's."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    trained = BertWordPieceTokenizer(lowercase=True)
    trained.train(
        [str(path) for path in texts],
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False,
    )
    folder.mkdir(parents=True, exist_ok=True)
    BertTokenizerFast(tokenizer_object=trained._tokenizer, do_lower_case=True).save_pretrained(str(folder))
    return folder


def write_stand_in_data(root: Path) -> Path:
    """The whole ``../shared/data`` layout under ``root``, made up. Returns ``root``."""
    write_mrpc(root / "glue")
    write_mnli(root / "glue")
    wikitext = write_text(root / "text" / "wikitext-2-valid.txt")
    brown = write_text(root / "text" / "brown.txt", paragraphs=120, seed=3)
    write_wordpiece_tokenizer(
        root / "tokenizers" / "bert-base-uncased", [wikitext, brown, *sorted((root / "glue").rglob("*.tsv"))]
    )
    # The width study's one tokenizer, kept from its pilot (configs/sweeps/width_ratios_cpu.yaml).
    write_wordpiece_tokenizer(root / "tokenizers" / "brown-wordpiece-8192", [brown])
    (root / "README.md").write_text("Made-up stand-ins for the real data in ../shared/data.\n", encoding="utf-8")
    return root
