"""Tokenizer loading (local, hub, offline) and training (WordPiece for mlm, byte-level BPE for clm)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tiedemb.data.tokenizers import check_vocab_size, configure_for_objective, load_tokenizer, train_tokenizer
from tiedemb.errors import UserError
from tiedemb.training import hub


def text_lines(path: Path) -> list[str]:
    with path.open(encoding="utf-8-sig") as handle:
        return [line.strip() for line in handle if line.strip()]


def pieces(tokenizer_dir: Path) -> int:
    """The vocabulary size written in a saved tokenizer's file."""
    return len(json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"])


def never_read():
    """A text iterator that fails the test if training reads it."""
    raise AssertionError("the training text was read although a saved tokenizer exists")
    yield ""  # pragma: no cover


def test_wordpiece_trained_to_300_round_trips_and_is_reused(tmp_path, made_up_text):
    save_dir = tmp_path / "wp"
    tokenizer = train_tokenizer(text_lines(made_up_text), kind="wordpiece", vocab_size=300, save_dir=save_dir)
    assert len(tokenizer) == 300
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokenizer.convert_ids_to_tokens(list(range(5))) == specials
    assert tokenizer.pad_token == "[PAD]" and tokenizer.mask_token == "[MASK]" and tokenizer.sep_token == "[SEP]"
    sentence = "the ancient city was built by the river on the north coast."
    ids = tokenizer(sentence, add_special_tokens=False).input_ids
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == sentence
    # The normaliser lowercases, as BERT uncased does.
    assert (
        tokenizer("The River", add_special_tokens=False).input_ids
        == tokenizer("the river", add_special_tokens=False).input_ids
    )
    # With special tokens the BERT template applies.
    assert (
        tokenizer("river").input_ids[0] == tokenizer.cls_token_id
        and tokenizer("river").input_ids[-1] == tokenizer.sep_token_id
    )

    again = train_tokenizer(never_read(), kind="wordpiece", vocab_size=300, save_dir=save_dir)
    assert again.get_vocab() == tokenizer.get_vocab()
    assert again.mask_token_id == tokenizer.mask_token_id


def test_byte_level_bpe_round_trips_exactly(tmp_path, made_up_text):
    tokenizer = train_tokenizer(text_lines(made_up_text), kind="bpe", vocab_size=400, save_dir=tmp_path / "bpe")
    assert len(tokenizer) == 400
    assert tokenizer.convert_ids_to_tokens(list(range(5))) == ["<pad>", "<unk>", "<s>", "</s>", "<mask>"]
    assert configure_for_objective(tokenizer, "clm") == tokenizer.convert_tokens_to_ids("</s>")
    # Byte-level BPE has no unknown token: case, accents and symbols all survive.
    sentence = "Homarus gammarus, known as the European lobster — Ærø costs €3.50!"
    ids = tokenizer(sentence, add_special_tokens=False).input_ids
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == sentence
    reloaded = load_tokenizer(tmp_path / "bpe")
    assert reloaded(sentence, add_special_tokens=False).input_ids == ids
    assert reloaded.eos_token == "</s>" and reloaded.pad_token == "<pad>"


def test_small_corpus_gives_fewer_tokens_with_a_warning(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="tiedemb.data"):
        tokenizer = train_tokenizer(["a b c", "a b"], kind="wordpiece", vocab_size=500, save_dir=tmp_path / "tiny")
    assert len(tokenizer) < 500
    assert "too small" in caplog.text


@pytest.mark.parametrize(("kind", "too_small", "smallest"), [("wordpiece", 5, 6), ("bpe", 261, 262)])
def test_vocab_size_must_fit_the_special_tokens(kind, too_small, smallest):
    with pytest.raises(UserError, match=rf"vocab_size={too_small} is too small.*at least {smallest}"):
        check_vocab_size(kind, too_small)
    assert check_vocab_size(kind, smallest) == smallest


def test_bpe_vocab_error_mentions_the_byte_alphabet():
    with pytest.raises(UserError, match="256-byte alphabet"):
        check_vocab_size("bpe", 100)


def test_missing_vocab_size_asks_for_tokenizer_or_vocab_size():
    with pytest.raises(UserError, match="`tokenizer`.*`vocab_size`"):
        check_vocab_size("wordpiece", None)


def test_missing_tokenizer_directory_is_named(tmp_path):
    missing = tmp_path / "no-such-tokenizer"
    with pytest.raises(UserError, match="no-such-tokenizer.*does not exist"):
        load_tokenizer(missing)


def test_local_tokenizer_loads_without_touching_the_hub(monkeypatch, wordpiece_dir):
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: pytest.fail("probed the hub for a local path"))
    tokenizer = load_tokenizer(wordpiece_dir)
    assert len(tokenizer) == pieces(wordpiece_dir)
    assert (
        configure_for_objective(tokenizer, "mlm") == tokenizer.sep_token_id == tokenizer.convert_tokens_to_ids("[SEP]")
    )


def test_uncached_hub_name_fails_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: pytest.fail("probed the hub although HF_HUB_OFFLINE=1"))
    with pytest.raises(UserError) as caught:
        load_tokenizer("tiedemb-test/no-such-tokenizer")
    message = str(caught.value)
    assert (
        "tiedemb-test/no-such-tokenizer" in message and "local tokenizer directory" in message and "\n" not in message
    )


@pytest.mark.end_to_end
def test_cached_hub_name_loads_offline(tmp_path, wordpiece_dir):
    """A hub name already in the local cache works with HF_HUB_OFFLINE=1 (fresh process: the flag is read at import)."""
    repo = tmp_path / "hub" / "models--tiedemb-test--bert"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    for file in wordpiece_dir.iterdir():
        shutil.copy(file, snapshot / file.name)
    (snapshot / "config.json").write_text('{"model_type": "bert"}')  # the hub copy has one; AutoTokenizer reads it
    script = "from tiedemb.data.tokenizers import load_tokenizer; print(len(load_tokenizer('tiedemb-test/bert')))"
    environment = os.environ | {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == str(pieces(wordpiece_dir))


def test_unreachable_hub_is_treated_as_offline(monkeypatch):
    """Without HF_HUB_OFFLINE, a failed probe must still keep the hub client from retrying for minutes."""
    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: False)
    with pytest.raises(UserError, match="cannot be reached"):
        load_tokenizer("tiedemb-test/no-such-tokenizer")
    assert constants.HF_HUB_OFFLINE is False  # the temporary offline switch is undone


def test_hub_probe_gives_up_on_a_dead_endpoint(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert hub.hub_reachable(timeout=2.0) is False


def test_clm_pads_with_eos_when_there_is_no_pad(tmp_path):
    tokenizer = train_tokenizer(["x y z"] * 5, kind="bpe", vocab_size=300, save_dir=tmp_path / "bpe")
    tokenizer.pad_token = None
    assert configure_for_objective(tokenizer, "clm") == tokenizer.eos_token_id
    assert tokenizer.pad_token_id == tokenizer.eos_token_id


def test_mlm_needs_a_mask_token(tmp_path):
    tokenizer = train_tokenizer(["x y z"] * 5, kind="bpe", vocab_size=300, save_dir=tmp_path / "bpe")
    tokenizer.mask_token = None
    with pytest.raises(UserError, match="no mask token"):
        configure_for_objective(tokenizer, "mlm")


RACE = """
import random, sys
from pathlib import Path
import time
import tiedemb.data.tokenizers as tokenizers
from tiedemb.data.tokenizers import tokenizer_fingerprint, train_tokenizer
train = tokenizers._train_and_save
tokenizers._train_and_save = lambda *args: (time.sleep(3), train(*args))[1]  # a training as long as a corpus's
rng = random.Random(0)
words = ["".join(rng.choice("abcdefghij") for _ in range(6)) for _ in range(3000)]
lines = [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)] * 2  # every word twice: ties
print(tokenizer_fingerprint(train_tokenizer(lines, kind="wordpiece", vocab_size=400, save_dir=Path(sys.argv[1]))))
"""


def test_processes_side_by_side_share_the_tokenizer_one_of_them_trains(tmp_path):
    """Training numbers tokens of equal count differently each time (two folders: two tokenizers), so
    two sweep cells that start together on one cache must not each train their own."""

    def start(folder):
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        return subprocess.Popen(
            [sys.executable, "-c", RACE, str(folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )

    apart = [start(tmp_path / name / "tokenizer") for name in ("a", "b")]
    together = [start(tmp_path / "shared" / "tokenizer") for _ in range(2)]
    fingerprints = [process.communicate(timeout=300)[0].strip() for process in apart + together]
    assert all(fingerprints), fingerprints
    assert fingerprints[0] != fingerprints[1]  # what the lock guards against
    assert fingerprints[2] == fingerprints[3]
