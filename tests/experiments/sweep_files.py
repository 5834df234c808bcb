"""Sweep files written for a test: one from a dict, and a tiny four-cell grid over the shipped configs."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def write_sweep(folder: Path, content: dict) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
    return path


def tiny_sweep(folder: Path, **extra) -> Path:
    return write_sweep(
        folder,
        {
            "name": "t",
            "configs": [str(CONFIGS / "tied.yaml"), str(CONFIGS / "scale" / "tiny.yaml")],
            "grid": {"model.head": ["tied", "untied"], "seed_everything": [0, 1]},
            "overrides": {"trainer.max_steps": 2},
            **extra,
        },
    )
