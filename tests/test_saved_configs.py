"""Configs that earlier versions saved beside their runs still load."""

from __future__ import annotations

from pathlib import Path

import yaml
from tiny_runs import TINY_TIED

from tiedemb.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_a_saved_config_naming_the_earlier_callback_path_still_runs(tmp_path, capsys):
    saved = {
        "seed_everything": 0,
        "trainer": {
            "callbacks": [
                {
                    "class_path": "tiedemb.resume.ResumableCheckpoint",
                    "init_args": {"monitor": "val/loss", "save_last": True},
                }
            ]
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(saved))
    main(
        [
            "fit",
            *TINY_TIED,
            "--config",
            str(path),
            "--trainer.max_steps=2",
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    assert list(tmp_path.rglob("last.ckpt"))
