"""TIEDEMB_LOG_LEVEL shows tiedemb's own log messages (tiedemb.training.exits)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tiedemb.cli import main
from tiedemb.errors import UserError
from tiedemb.training.exits import LOG_LEVEL_ENV, set_log_level, set_log_level_from_env

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--config", str(ROOT / "configs" / "tied.yaml"), "--config", str(ROOT / "configs" / "scale" / "tiny.yaml")]


@pytest.fixture(autouse=True)
def restore_tiedemb_logger():
    logger = logging.getLogger("tiedemb")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    yield
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


def test_unset_leaves_info_messages_hidden(monkeypatch, capsys):
    monkeypatch.delenv(LOG_LEVEL_ENV, raising=False)
    set_log_level_from_env()
    logging.getLogger("tiedemb.data").info("prepared")
    assert "prepared" not in capsys.readouterr().err


def test_the_variable_shows_info_messages_once(monkeypatch, capsys):
    monkeypatch.setenv(LOG_LEVEL_ENV, "INFO")
    set_log_level_from_env()
    set_log_level_from_env()  # a second call adds no second handler
    logging.getLogger("tiedemb.data").info("prepared %d blocks", 3)
    logging.getLogger("tiedemb.data").debug("not at info")
    assert capsys.readouterr().err == "INFO tiedemb.data: prepared 3 blocks\n"


def test_a_bad_level_is_a_user_error(monkeypatch):
    monkeypatch.setenv(LOG_LEVEL_ENV, "loud")
    with pytest.raises(UserError, match="TIEDEMB_LOG_LEVEL='loud' is not a known choice"):
        set_log_level_from_env()
    with pytest.raises(UserError, match="--log_level"):
        set_log_level("verbose")


@pytest.mark.end_to_end
def test_a_run_shows_the_data_it_prepared_at_info(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(LOG_LEVEL_ENV, "info")
    main(
        [
            "fit",
            *TINY,
            "--trainer.max_steps=1",
            "--trainer.limit_val_batches=0",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert "INFO tiedemb.data: pretraining data: train_tokens=16384" in capsys.readouterr().err
