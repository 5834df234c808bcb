"""What a study's seed varies, the fixed held-out text, and the out-of-domain validation column."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tiedemb.cli import main
from tiedemb.data import PretrainData
from tiedemb.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--config",
    str(ROOT / "configs/tied.yaml"),
    "--config",
    str(ROOT / "configs/scale/tiny.yaml"),
    "--model.objective=mlm",
    "--trainer.logger=false",
]


def first_batches(tmp_path: Path, seed: int) -> tuple[dict, dict]:
    """The first training and validation batches of the run ``--seed_everything=seed`` would make."""
    cli = main([*TINY, f"--seed_everything={seed}", f"--trainer.default_root_dir={tmp_path}"], run=False)
    data = cli.datamodule
    data.setup("fit")
    return next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))


@pytest.mark.end_to_end
def test_a_run_seed_sets_the_training_order_and_masks_and_leaves_validation_alone(tmp_path):
    train_0, val_0 = first_batches(tmp_path, 0)
    train_0_again, val_0_again = first_batches(tmp_path, 0)
    train_1, val_1 = first_batches(tmp_path, 1)
    assert torch.equal(train_0["input_ids"], train_0_again["input_ids"])
    assert torch.equal(train_0["labels"], train_0_again["labels"])
    assert not torch.equal(train_0["labels"], train_1["labels"])  # other blocks, other masks
    # every seed is scored on the same validation blocks with the same masks
    assert torch.equal(val_0["input_ids"], val_1["input_ids"]) and torch.equal(val_0["labels"], val_1["labels"])
    assert torch.equal(val_0["labels"], val_0_again["labels"])


def test_a_given_data_seed_wins_over_the_run_seed(monkeypatch):
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")
    assert PretrainData(vocab_size=512, synthetic_tokens=4096, synthetic_val_tokens=1024).seed == 7
    assert PretrainData(vocab_size=512, synthetic_tokens=4096, synthetic_val_tokens=1024, seed=3).hparams.seed == 3


def write_documents(path: Path, start: int, count: int) -> Path:
    # documents of distinct numbered words, so which ones were held out can be read off the blocks
    path.write_text(
        "\n".join(" ".join(f"w{start + i} word{j % 17} text" for j in range(60)) for i in range(count)) + "\n"
    )
    return path


def small_text(tmp_path: Path, **options) -> PretrainData:
    return PretrainData(
        train_files=[str(write_documents(tmp_path / "train.txt", 0, 40))],
        objective="clm",
        vocab_size=300,
        block_size=16,
        batch_size=4,
        val_fraction=0.1,
        cache_dir=str(tmp_path / "cache"),
        **options,
    )


def held(data: PretrainData) -> list:
    data.prepare_data()
    return data.text.open()["val"]["input_ids"]


def test_the_held_out_documents_follow_the_corpus_seed_not_the_run_seed(tmp_path):
    assert held(small_text(tmp_path, seed=1)) == held(small_text(tmp_path, seed=2))
    assert held(small_text(tmp_path, seed=1)) != held(small_text(tmp_path, seed=1, corpus_seed=5))


def test_an_out_of_domain_text_is_a_second_validation_loader_with_its_baselines(tmp_path):
    other = write_documents(tmp_path / "other.txt", 1000, 10)
    data = small_text(tmp_path, seed=0, ood_val_files=[str(other)], ood_val_blocks=3)
    data.prepare_data()
    data.setup("fit")
    loaders = data.val_dataloader()
    assert len(loaders) == 2 and len(loaders[1].dataset) == 3
    baselines = data.baselines()
    assert set(baselines) == {"data/unigram_loss", "data/bigram_loss", "data/ood_unigram_loss", "data/ood_bigram_loss"}
    # numbered words never seen in training make the out-of-domain text harder for a unigram model
    assert baselines["data/ood_unigram_loss"] > baselines["data/unigram_loss"]


def test_text_is_tokenised_in_prepare_data_once_and_opened_in_setup(tmp_path):
    data = small_text(tmp_path)
    entries = lambda: sorted(path.name for path in (tmp_path / "cache" / "text").iterdir())  # noqa: E731
    assert len(data.tokenizer) == data.vocab_size  # known before any text is tokenised: the model's size
    assert entries() == []  # building the data module tokenises nothing
    data.prepare_data()
    (entry,) = entries()
    written = (tmp_path / "cache" / "text" / entry / "stats.json").stat().st_mtime_ns
    data.prepare_data()  # cached: left as it is
    assert (tmp_path / "cache" / "text" / entry / "stats.json").stat().st_mtime_ns == written
    data.setup("fit")
    assert len(data.train_set) == data.text.stats()["train_blocks"] > 0
    assert next(iter(data.train_dataloader()))["input_ids"].shape == (4, 16)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ood_val_files": ["x.txt"]}, r"data.ood_val_files=\['x.txt'\] has no effect without data.train_files"),
        ({"ood_val_blocks": 4}, "data.ood_val_blocks=4 has no effect without data.ood_val_files"),
    ],
)
def test_out_of_domain_options_without_their_text_are_refused(options, message):
    with pytest.raises(UserError, match=message):
        PretrainData(vocab_size=512, **options)


def test_a_checkpoint_records_its_tokenizer_and_a_resume_with_another_is_refused(tmp_path):
    from tiedemb.data.tokenizers import (
        TOKENIZER_STATE,
        load_tokenizer,
        recorded_fingerprint,
        tokenizer_fingerprint,
        tokenizer_of_run,
    )

    data = small_text(tmp_path, seed=3)
    state = data.state_dict()
    (saved,) = (tmp_path / "cache" / "tokenizers").iterdir()
    # the fingerprint the run records is that of the folder its tokenizer was saved in
    assert state[TOKENIZER_STATE] == tokenizer_fingerprint(load_tokenizer(saved))
    checkpoint = {"state_dict": {}, "PretrainData": state}
    assert recorded_fingerprint(checkpoint) == state[TOKENIZER_STATE]
    recorded = dict(data.hparams)
    assert tokenizer_of_run(recorded, len(data.tokenizer), "clm", fingerprint=state[TOKENIZER_STATE]) == str(saved)
    assert tokenizer_of_run(recorded, len(data.tokenizer), "clm", fingerprint="another") is None
    # kept under a name an older key of the text gave it: found by its fingerprint alone
    renamed = saved.rename(saved.with_name("bpe-512-0123456789abcdef0123"))
    assert tokenizer_of_run(recorded, len(data.tokenizer), "clm", fingerprint=state[TOKENIZER_STATE]) == str(renamed)
    assert tokenizer_of_run(recorded, len(data.tokenizer), "clm") is None
    assert tokenizer_of_run(recorded, len(data.tokenizer), "clm", fingerprint="another") is None
    renamed.rename(saved)
    data.load_state_dict(state)  # the same tokenizer: resumes
    with pytest.raises(UserError, match="the checkpoint was trained with another tokenizer"):
        small_text(tmp_path, seed=3).load_state_dict({**state, TOKENIZER_STATE: "0123456789abcdef"})
