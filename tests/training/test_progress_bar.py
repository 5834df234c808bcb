"""The rich progress bar says "Epoch 0", not "Epoch 0/-2", when only max_steps bounds the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import RichProgressBar

from tiedemb.cli import main
from tiedemb.training.progress_bar import StepBoundRichProgressBar

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


@pytest.mark.end_to_end
@pytest.mark.parametrize(
    ("bounds", "label"),
    [
        (["--trainer.max_steps=2"], "Epoch 3"),
        (["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.val_check_interval=2"], "Epoch 3/0"),
    ],
)
def test_the_bar_numbers_epochs_only_against_an_epoch_bound(tmp_path, bounds, label):
    cli = main(["fit", *TINY, *bounds, f"--trainer.default_root_dir={tmp_path}"])
    bar = cli.trainer.progress_bar_callback
    assert type(bar) is StepBoundRichProgressBar
    assert bar._get_train_description(3).rstrip() == label
    # Lightning's own label for the same run: what a step-bound run showed before
    lightning_label = RichProgressBar._get_train_description(bar, 3).rstrip()
    assert lightning_label == ("Epoch 3/-2" if "max_steps" in bounds[0] else label)


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
