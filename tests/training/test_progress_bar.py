"""The rich progress bar says "Epoch 0", not "Epoch 0/-2", when only max_steps bounds the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback, RichProgressBar
from rich.text import Text

from tiedemb.cli import main
from tiedemb.training.progress_bar import step_bound_label

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--config",
    str(ROOT / "configs" / "tied.yaml"),
    "--config",
    str(ROOT / "configs" / "scale" / "tiny.yaml"),
    "--trainer.logger=false",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
]


class LabelProbe(Callback):
    """Records the training task's label as the bar shows it, at every training batch."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def on_train_batch_end(self, trainer, *args) -> None:
        description = trainer.progress_bar_callback.train_progress_bar.description
        self.labels.append(Text.from_markup(description).plain.rstrip())


@pytest.mark.end_to_end
@pytest.mark.parametrize(
    ("bounds", "label"),
    [
        (["--trainer.max_steps=2"], "Epoch 0"),
        (["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.val_check_interval=2"], "Epoch 0/0"),
    ],
)
def test_the_bar_numbers_epochs_only_against_an_epoch_bound(tmp_path, bounds, label):
    cli = main([*TINY, *bounds, f"--trainer.default_root_dir={tmp_path}"], run=False)
    assert type(cli.trainer.progress_bar_callback) is RichProgressBar
    probe = LabelProbe()
    cli.trainer.callbacks.append(probe)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert probe.labels == [label, label]


def test_the_label_drops_only_lightnings_bound_of_minus_one_epoch():
    assert step_bound_label("[progress.description]Epoch 3/-2", 3, -1) == "[progress.description]Epoch 3"
    assert step_bound_label("Epoch 3/0 ", 3, 1) == "Epoch 3/0 "
    assert step_bound_label("Epoch 3", 3, None) == "Epoch 3"


def test_a_progress_bar_the_config_chose_is_left_as_it_is(tmp_path):
    cli = main(
        [
            *TINY,
            "--trainer.max_steps=20",
            "--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )
    assert type(cli.trainer.progress_bar_callback).__name__ == "TQDMProgressBar"
