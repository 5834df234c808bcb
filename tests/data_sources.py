"""Small inputs in each data source's own format, for ``tiedemb data prepare`` without the network.

* ``BROWN``: tests/fixtures/data_sources/brown, NLTK's tagged Brown files: the opening sentences of
  ``ca01`` and ``ca02`` as NLTK ships them, and a made-up ``cj01`` with the corpus's quirks (tokens
  holding ``/``, inch marks before a closing quote), beside ``cats.txt`` and a README that are not
  documents. ``write_made_up_brown`` writes a larger made-up corpus in the same format.
* ``hub_tables``: a hub dataset's splits as ``datasets`` hands them over (Arrow tables);
  ``WIKITEXT``, ``MRPC`` and ``MNLI`` are rows with the hub's columns (test splits labelled ``-1``,
  as there).
* ``TOKENIZER``: tests/fixtures/data_sources/tokenizer, a tokenizer folder as the hub holds one
  (``vocab.txt`` and ``tokenizer_config.json``), of a few dozen words.
"""

from __future__ import annotations

import random
from pathlib import Path

from stand_in_data import WORDS, sentence

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data_sources"
BROWN = FIXTURES / "brown"
TOKENIZER = FIXTURES / "tokenizer"

WIKITEXT = {
    "validation": [
        "",
        " = Homarus gammarus = \n",
        "",
        " Homarus gammarus , known as the European lobster or common lobster , is a species of <unk> lobster . \n",
        "",
        " = = Description = = \n",
        "",
        " Homarus gammarus is a large <unk> , with a body length up to 60 centimetres ( 24 in ) . \n",
        " The first pair of <unk> is armed with a large , asymmetrical pair of claws . \n",
        "",
    ],
    "train": ["", " = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 : <unk> Chronicles . \n"],
}
"""wikitext-2-v1's rows: an original line each, a blank one as ``""``, <unk> for rare words."""

MRPC = {
    "train": {
        "sentence1": [
            'Amrozi accused his brother , whom he called " the witness " , of deliberately distorting his evidence .',
            "Yucaipa owned Dominick 's before selling the chain to Safeway in 1998 for $ 2.5 billion .",
            "They had published an advertisement on the Internet on June 10 .",
        ],
        "sentence2": [
            'Referring to him as only " the witness " , Amrozi accused his brother of deliberately distorting '
            "his evidence .",
            "Yucaipa bought Dominick 's in 1995 for $ 693 million and sold it to Safeway for $ 1.8 billion in 1998 .",
            "On June 10 , the ship 's owners had published an advertisement\ton the Internet .",  # a stray tab
        ],
        "label": [1, 0, 1],
        "idx": [0, 1, 2],
    },
    "validation": {
        "sentence1": ["He said the foodservice pie business doesn 't fit the company 's long-term growth strategy ."],
        "sentence2": ['" The foodservice pie business does not fit our long-term growth strategy .'],
        "label": [1],
        "idx": [0],
    },
    "test": {
        "sentence1": [
            "PCCW 's chief operating officer , Mike Butcher , and Alex Arena , the chief financial officer , "
            "will report directly to Mr So ."
        ],
        "sentence2": [
            "Current Chief Operating Officer Mike Butcher and Group Chief Financial Officer Alex Arena "
            "will report to So ."
        ],
        "label": [-1],
        "idx": [0],
    },
}
"""nyu-mll/glue mrpc's columns: the first pairs of its splits (one with a tab no TSV field may hold)."""

MNLI = {
    split: {
        "premise": [f"{split} premise {number} about the river ." for number in range(3)],
        "hypothesis": [f"{split} hypothesis {number} ." for number in range(3)],
        "label": [-1, -1, -1] if split.startswith("test") else [0, 1, 2],
        "idx": [0, 1, 2],
    }
    for split in ("train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched")
}
"""nyu-mll/glue mnli's columns and splits, with made-up pairs."""


def hub_tables(splits: dict) -> dict:
    """Split -> its Arrow table, as ``datasets.load_dataset`` gives one: from a dict of columns, or a
    WikiText list of rows."""
    import datasets

    return {
        split: datasets.Dataset.from_dict({"text": columns} if isinstance(columns, list) else columns).data
        for split, columns in splits.items()
    }


def write_made_up_brown(folder: Path, documents: int = 40, words: int = 700, seed: int = 0) -> Path:
    """A Brown corpus in NLTK's tagged format, made up: ``documents`` files of about ``words`` words."""
    rng = random.Random(seed)
    tags = ("at", "nn", "vbd", "in", "jj", "np", "nns", "cc")
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(documents):
        sentences = []
        while sum(len(s) for s in sentences) < words:
            tokens = [f"{word}/{rng.choice(tags)}" for word in sentence(rng, 8, 20).split()]
            if rng.random() < 0.2:
                tokens[1:1] = ["``/``", f"{rng.choice(WORDS)}/nn", "''/''"]
            sentences.append([*tokens, "./."])
        name = f"c{'abcdefghjklmnpr'[number % 15]}{number // 15 + 1:02d}"
        (folder / name).write_text("\n\n" + "".join(f"\t{' '.join(s)}\n\n\n" for s in sentences), encoding="utf-8")
    return folder
