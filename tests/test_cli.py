"""The command line as users drive it: every shipped YAML, --print_config, errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiedemb.cli import main

pytestmark = pytest.mark.end_to_end  # runs the real command line

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
VARIANTS = sorted(p for p in CONFIGS.glob("*.yaml"))
TINY = CONFIGS / "scale" / "tiny.yaml"
#: Configs of the wider field's remedies: a head plus scale settings, so the file is not named after its head.
REMEDY_HEADS = {"tied_t5": "tied", "tied_gemma": "tied", "tied_mup": "tied"}


def head_of(config: Path) -> str:
    return REMEDY_HEADS.get(config.stem, config.stem)


def run_quiet(tmp_path: Path, *args: str) -> object:
    return main(
        [
            "fit",
            *args,
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )


def test_the_five_variants_ship():
    names = {p.stem for p in VARIANTS}
    assert {"tied", "untied", "tied_scaled_init", "tied_orth", "tied_shuffle"} <= names


@pytest.mark.parametrize("config", VARIANTS, ids=lambda p: p.stem)
def test_every_variant_config_runs_a_step_at_tiny_scale(tmp_path, config):
    cli = run_quiet(
        tmp_path,
        "--config",
        str(config),
        "--config",
        str(TINY),
        "--trainer.max_steps=1",
        "--trainer.val_check_interval=1",
    )
    assert cli.trainer.global_step == 1
    assert cli.model.hparams.head == head_of(config)
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size == 512  # linked, not typed twice
    assert (Path(cli.run_dir) / "checkpoints" / "last.ckpt").is_file()
    assert Path(cli.run_dir).parent == Path(tmp_path) and Path(cli.run_dir).name.startswith(f"{config.stem}-")


@pytest.mark.parametrize("overlay", sorted((CONFIGS / "scale").glob("*.yaml")), ids=lambda p: p.stem)
def test_scale_overlays_parse_on_every_variant(overlay, capsys):
    for config in VARIANTS:
        with pytest.raises(SystemExit) as exited:
            main(["fit", "--config", str(config), "--config", str(overlay), "--print_config"])
        assert exited.value.code == 0
        printed = capsys.readouterr().out
        assert f"head: {head_of(config)}" in printed


def test_base_overlay_is_bert_base(capsys):
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                "--config",
                str(CONFIGS / "tied.yaml"),
                "--config",
                str(CONFIGS / "scale" / "base.yaml"),
                "--print_config",
            ]
        )
    printed = capsys.readouterr().out
    for line in ("hidden_size: 768", "num_layers: 12", "num_heads: 12", "intermediate_size: 3072", "vocab_size: 30522"):
        assert line in printed


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd or ROOT,
        timeout=300,
    )


def test_default_logger_records_offline_without_credentials(tmp_path):
    """No key and no network: W&B must neither prompt nor wait; the run is kept for `wandb sync`.

    W&B speaks here (``WANDB_SILENT=false``, as for a user with credentials), and the log carries
    none of the warnings the default loggers used to cause without any setting of the user's: W&B's
    on the git root it looks for in a save folder not yet made and torch's deprecation of the pytree
    class Lightning builds; Lightning's start-up lines stay. (W&B's word on the ``anonymous`` argument
    Lightning always passes is left.)
    """
    env = {"WANDB_API_KEY": "", "NETRC": str(tmp_path / "no-netrc"), "HOME": str(tmp_path), "WANDB_SILENT": "false"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "main.py"),
            "fit",
            "--config",
            str(CONFIGS / "tied.yaml"),
            "--config",
            str(TINY),
            "--trainer.max_steps=2",
            f"--trainer.default_root_dir={tmp_path}",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    offline_runs = list(Path(tmp_path).rglob("offline-run-*"))
    assert offline_runs, "no offline W&B run directory was written"
    log = result.stdout + result.stderr
    assert "wandb: Tracking run" in log  # W&B did speak
    for noise in ("git root", "LeafSpec"):
        assert noise not in log, log[-3000:]
    assert "GPU available: False" in log


def test_each_wandb_logger_has_its_save_folder_before_its_run_starts(tmp_path):
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    from tiedemb.training.hub import make_wandb_folders

    wandb_logger = WandbLogger(save_dir=str(tmp_path / "wandb"))
    csv = CSVLogger(save_dir=str(tmp_path / "csv"))
    make_wandb_folders([wandb_logger, csv])
    assert (tmp_path / "wandb").is_dir()
    assert not (tmp_path / "csv").exists()  # other loggers are left alone


def test_without_credentials_the_wandb_logger_is_told_offline_and_the_environment_is_left(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    args = ["--config", str(CONFIGS / "tied.yaml"), "--config", str(TINY), f"--trainer.default_root_dir={tmp_path}"]
    cli = main(args, run=False)
    (logger,) = [logger for logger in cli.trainer.loggers if isinstance(logger, WandbLogger)]
    # the arguments the logger passes to wandb.init when its run starts (read here, not changed)
    assert logger._wandb_init["mode"] == "offline" and logger._wandb_init["settings"] == {"silent": True}
    assert not [name for name in os.environ if name.startswith("WANDB_")]
    monkeypatch.setenv("WANDB_MODE", "disabled")  # a mode the user set is W&B's to read
    given = main(args, run=False)
    (logger,) = [logger for logger in given.trainer.loggers if isinstance(logger, WandbLogger)]
    assert logger._wandb_init.get("mode") is None


GLUE_CONFIGS = sorted((CONFIGS / "glue").glob("*.yaml"))
D_E_OVERLAYS = sorted((CONFIGS / "glue" / "de").glob("*.yaml"))


def test_glue_configs_ship_for_both_tasks_and_every_embedding_width():
    assert {p.stem for p in GLUE_CONFIGS} >= {"mnli", "mrpc"}
    assert {int(p.stem) for p in D_E_OVERLAYS} == {128, 256, 384, 512, 768}


@pytest.mark.parametrize("config", GLUE_CONFIGS, ids=lambda p: p.stem)
def test_every_glue_config_runs_at_tiny_scale_on_local_data(tmp_path, config, glue_dir, wordpiece_dir):
    """Each GLUE config fits a few steps on a classic glue_data folder, d_e overlay on."""
    cli = main(
        [
            "fit",
            "--config",
            str(config),
            "--config",
            str(D_E_OVERLAYS[0]),
            f"--data.data_dir={glue_dir}",
            f"--data.tokenizer={wordpiece_dir}",
            "--data.max_train_samples=32",
            "--data.batch_size=8",
            "--model.pretrained=null",
            "--model.hidden_size=32",
            "--model.num_layers=1",
            "--model.num_heads=2",
            "--model.intermediate_size=64",
            "--model.embedding_dim=16",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--trainer.limit_val_batches=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    task = cli.datamodule.task_spec.name
    assert cli.trainer.global_step == 2 and cli.model.hparams.task == task == config.stem
    assert cli.model.hparams.num_labels == cli.datamodule.num_labels  # linked, not typed twice
    assert cli.model.main_metric in cli.trainer.callback_metrics  # what the config's checkpoint monitors
    monitored = [c.monitor for c in cli.trainer.checkpoint_callbacks]
    assert monitored == [cli.model.main_metric]
    # GLUE's own defaults, not the pretraining ones jsonargparse would carry over from the CLI default
    hp = cli.model.hparams
    assert (hp.warmup_steps, hp.eps, tuple(hp.betas), hp.warmup_ratio) == (None, 1e-8, (0.9, 0.999), 0.1)


@pytest.mark.parametrize("overlay", D_E_OVERLAYS, ids=lambda p: p.stem)
def test_embedding_width_overlays_parse_on_every_glue_config(overlay, capsys):
    for config in GLUE_CONFIGS:
        with pytest.raises(SystemExit) as exited:
            main(["fit", "--config", str(config), "--config", str(overlay), "--print_config"])
        assert exited.value.code == 0
        assert f"embedding_dim: {overlay.stem}" in capsys.readouterr().out


def csv_metrics(root: Path) -> list[dict[str, str]]:
    import csv

    with open(next(root.rglob("metrics.csv")), newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_default_loggers_record_the_learning_rate_and_throughput(tmp_path, monkeypatch):
    """The default callbacks: Lightning's LearningRateMonitor and ThroughputMonitor, in the CSV metrics."""
    monkeypatch.chdir(tmp_path)  # the default loggers write under ./runs
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli = main(
        [
            "fit",
            "--config",
            str(CONFIGS / "tied.yaml"),
            "--config",
            str(TINY),
            "--trainer.max_steps=12",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
        ]
    )
    assert {type(logger).__name__ for logger in cli.trainer.loggers} == {"WandbLogger", "CSVLogger"}
    rows = csv_metrics(Path(cli.run_dir) / "csv")
    lr = [(int(row["step"]), float(row["lr/pg1"])) for row in rows if row.get("lr/pg1")]
    assert [step for step, _ in lr] == list(range(12))  # every step (log_every_n_steps: 1)
    peak = cli.model.hparams.learning_rate
    assert lr[0][1] == pytest.approx(peak / 3)  # warmup_steps: 2, so 1/3, 2/3, then the peak
    assert max(value for _, value in lr) == pytest.approx(peak)
    assert all(row["lr/pg1"] == row["lr/pg2"] for row in rows if row.get("lr/pg1"))
    assert "lr" not in rows[0]  # logged once, by the callback
    tokens = [float(row["train/device/items_per_sec"]) for row in rows if row.get("train/device/items_per_sec")]
    flops = [float(row["train/device/flops_per_sec"]) for row in rows if row.get("train/device/flops_per_sec")]
    assert len(tokens) == len(flops) == 3  # the window of 10 batches is full from batch 10
    assert all(value > 0 for value in tokens + flops)


def test_print_completion_prints_a_bash_completion_script(tmp_path):
    """``main.py --print_completion=shtab-bash``: a bash script completing the subcommands and their options."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "--print_completion=shtab-bash"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    script = result.stdout
    assert "complete -o bashdefault -F _shtab_main_py main.py" in script  # registers itself for main.py
    # every subcommand's options: --verbose is validate's and test's, --samples similarity's
    for word in ("fit", "similarity", "--config", "--trainer.max_steps", "--run_name", "--verbose", "--samples"):
        assert word in script, word
    (tmp_path / "completion.sh").write_text(script)
    syntax = subprocess.run(["bash", "-n", str(tmp_path / "completion.sh")], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_a_subcommand_run_alone_still_lists_and_checks_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    help_text = capsys.readouterr().out
    assert "--verbose" in help_text and "--ckpt_path" in help_text  # validate's own arguments
    with pytest.raises(SystemExit) as exited:
        main(["fitt"])
    assert exited.value.code == 2
    assert "choose from 'fit', 'validate', 'test', 'predict', 'similarity'" in capsys.readouterr().err
