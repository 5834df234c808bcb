"""Every run leaves status.json beside its CSV metrics: running, then finished or failed."""

from __future__ import annotations

import json
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger

from tiedemb.training.status_file import RunStatus


class BreaksAtStep(BoringModel):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.break_at = step

    def training_step(self, batch, batch_idx):
        if self.global_step == self.break_at:
            raise RuntimeError("the loss became nan\nat step 3")
        return super().training_step(batch, batch_idx)


def fit(tmp_path, model: L.LightningModule, steps: int = 5, ckpt_path: str | None = None) -> L.Trainer:
    last = ModelCheckpoint(dirpath=tmp_path / "checkpoints", save_last=True, save_top_k=0, every_n_train_steps=2)
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=steps,
        logger=CSVLogger(tmp_path, name="csv"),
        callbacks=[RunStatus(), last],
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer


def status(tmp_path, version: int = 0) -> dict:
    return json.loads((tmp_path / "csv" / f"version_{version}" / "status.json").read_text())


def test_a_finished_run_says_so_and_the_logger_sees_a_folder_of_its_own(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path, BoringModel())
    record = status(tmp_path)
    assert record["state"] == "finished" and record["stage"] == "fit" and record["step"] == 5
    assert record["started"] <= record["finished"] and "message" not in record
    # the status is written into the folder the logger made, not one it then finds "not empty"
    assert not [w for w in caught if "not empty" in str(w.message)]
    assert trainer.logger.log_dir == str(tmp_path / "csv" / "version_0")


def test_a_run_that_raises_is_failed_with_the_exceptions_last_line(tmp_path):
    with pytest.raises(RuntimeError, match="nan"):
        fit(tmp_path, BreaksAtStep(3))
    record = status(tmp_path)
    assert record["state"] == "failed" and record["step"] == 3
    assert record["message"] == "RuntimeError: at step 3"


# The test's own Trainers: the tester has no ModelCheckpoint, and BoringModel's loader no state.
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`", "ignore:You're resuming from a checkpoint")
def test_a_resumed_run_and_a_test_of_its_checkpoint_go_on_under_the_first_runs_id(tmp_path):
    with pytest.raises(RuntimeError):
        fit(tmp_path, BreaksAtStep(3), steps=6)
    first = status(tmp_path, 0)
    assert first["state"] == "failed" and len(first["run"]) == 16
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["callbacks"]["RunStatus"] == {"run": first["run"]}
    fit(tmp_path, BoringModel(), steps=6, ckpt_path=str(last))
    resumed = status(tmp_path, 1)
    assert (resumed["state"], resumed["run"], resumed["step"]) == ("finished", first["run"], 6)
    tester = L.Trainer(
        default_root_dir=tmp_path,
        logger=CSVLogger(tmp_path, name="csv"),
        callbacks=[RunStatus()],
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_test_batches=1,
    )
    tester.test(BoringModel(), ckpt_path=str(last))
    assert (status(tmp_path, 2)["stage"], status(tmp_path, 2)["run"]) == ("test", first["run"])
    # a fresh run gets an id of its own
    fit(tmp_path / "other", BoringModel(), steps=2)
    assert status(tmp_path / "other", 0)["run"] != first["run"]


def test_a_status_that_cannot_be_written_costs_a_warning_not_the_run_or_its_error(tmp_path, monkeypatch, caplog):
    import errno

    import tiedemb.training.status_file as status_file

    def disk_full(folder, content):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(status_file, "write_status", disk_full)
    assert fit(tmp_path / "ok", BoringModel()).global_step == 5
    with pytest.raises(RuntimeError, match="at step 3"):  # the run's own error, not the status file's
        fit(tmp_path / "broken", BreaksAtStep(3))
    assert "could not write the run's status.json" in caplog.text and "No space left" in caplog.text
