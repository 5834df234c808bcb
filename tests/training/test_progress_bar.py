"""The rich progress bar says "Epoch 0", not "Epoch 0/-2", when only max_steps bounds the run, and shows no
``v_num``; the model summary shows no column of zero FLOPs."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback, RichProgressBar
from rich.text import Text

from tiedemb.cli import main
from tiedemb.training.progress_bar import RunProgressBar, step_bound_label

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
    assert type(cli.trainer.progress_bar_callback) is RunProgressBar
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


def test_the_bar_leaves_out_the_loggers_version(tmp_path):
    from lightning import Trainer
    from lightning.pytorch.loggers import CSVLogger

    trainer = Trainer(logger=CSVLogger(str(tmp_path)), enable_checkpointing=False, enable_model_summary=False)
    assert "v_num" in RichProgressBar().get_metrics(trainer, None)  # what Lightning shows
    assert "v_num" not in RunProgressBar().get_metrics(trainer, None)


def test_the_model_summary_leaves_out_flops_it_did_not_count(capsys):
    import rich

    from tiedemb.training.model_summary import SummaryWithoutFlops

    data = [
        (" ", ["0"]),
        ("Name", ["model"]),
        ("Type", ["Transformer"]),
        ("Params", ["90.5 K"]),
        ("Mode", ["train"]),
        ("FLOPs", ["0"]),
    ]
    rich.reconfigure(width=120)  # the summary prints on rich's console
    SummaryWithoutFlops.summarize(data, 90500, 90500, 0.36, {"train": 35, "eval": 0}, total_flops=0)
    printed = capsys.readouterr().out
    assert "Transformer" in printed and "Total params: 90.5 K" in printed and "FLOPs" not in printed
    SummaryWithoutFlops.summarize(data, 90500, 90500, 0.36, {"train": 35, "eval": 0}, total_flops=2000)
    assert "Total FLOPs: 2.0 K" in capsys.readouterr().out
