"""The width study's control at tiny scale: configs/width/brown_cpu.yaml with model.head=untied_orth
trains on text with a given tokenizer, keeps BERT's transform, and logs the tokenizer's fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tiedemb.cli import main
from tiedemb.data.tokenizers import load_tokenizer, tokenizer_fingerprint

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.end_to_end


def csv_only(folder: Path) -> str:
    """CSV metrics only: what these tests read, and no W&B run in this test process (which shares the
    process's W&B service with every in-process run of the worker)."""
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(folder), "name": "csv"},
    }
    return f"--trainer.logger={json.dumps([logger])}"


def test_the_untied_control_trains_with_the_tied_heads_transform_and_logs_its_tokenizer(
    tmp_path, stand_in_data, wordpiece_dir
):
    text = stand_in_data / "text"
    cli = main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "width" / "brown_cpu.yaml"),
            f"--data.train_files=[{text / 'brown.txt'}]",
            f"--data.ood_val_files=[{text / 'wikitext-2-valid.txt'}]",
            "--data.ood_val_blocks=4",
            f"--data.tokenizer={wordpiece_dir}",
            "--data.vocab_size=null",
            "--data.block_size=32",
            "--data.batch_size=4",
            f"--data.cache_dir={tmp_path / 'cache'}",
            "--model.head=untied_orth",
            "--model.embedding_dim=8",
            "--model.hidden_size=32",
            "--model.num_layers=1",
            "--model.num_heads=2",
            "--model.intermediate_size=64",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.default_root_dir={tmp_path / 'run'}",
            csv_only(tmp_path / "run"),
        ]
    )
    model = cli.model.model
    head = model.head
    # BERT's transform (dense + bias, GELU, LayerNorm) before an output matrix of the head's own
    assert head.projection.bias is not None and head.norm is not None and head.activation is not None
    assert head.decoder.weight is not model.embedding.token.weight and not model.is_tied
    assert head.decoder.weight.shape == model.embedding.token.weight.shape
    logged = [yaml.safe_load(path.read_text()) for path in (tmp_path / "run").rglob("hparams.yaml")]
    expected = tokenizer_fingerprint(load_tokenizer(str(wordpiece_dir)))
    assert [hparams.get("tokenizer_fingerprint") for hparams in logged] == [expected]


def test_a_runs_trained_tokenizer_is_kept_as_the_folder_the_study_names(tmp_path, stand_in_data, capsys):
    from tiedemb.data.tokenizers import main as keep

    text = stand_in_data / "text"
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "width" / "brown_cpu.yaml"),
            f"--data.train_files=[{text / 'brown.txt'}]",
            f"--data.ood_val_files=[{text / 'wikitext-2-valid.txt'}]",
            "--data.ood_val_blocks=4",
            "--data.vocab_size=300",
            "--data.block_size=32",
            "--data.batch_size=4",
            f"--data.cache_dir={tmp_path / 'cache'}",
            "--model.embedding_dim=8",
            "--model.hidden_size=32",
            "--model.num_layers=1",
            "--model.num_heads=2",
            "--model.intermediate_size=64",
            "--trainer.max_steps=1",
            "--trainer.val_check_interval=1",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.default_root_dir={tmp_path / 'run'}",
            csv_only(tmp_path / "run"),
        ]
    )
    (logged,) = [yaml.safe_load(path.read_text()) for path in (tmp_path / "run").rglob("hparams.yaml")]
    kept = tmp_path / "tokenizers" / "kept"
    assert keep([str(tmp_path / "run"), str(kept)]) == 0
    assert tokenizer_fingerprint(load_tokenizer(str(kept))) == logged["tokenizer_fingerprint"]
    assert str(kept) in capsys.readouterr().out
    # never overwritten: a second keep into the same folder is refused in one line, the folder untouched
    before = sorted(path.name for path in kept.iterdir())
    assert keep([str(tmp_path / "run"), str(kept)]) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert sorted(path.name for path in kept.iterdir()) == before
