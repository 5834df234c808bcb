"""Checkpoints saved the way Lightning saves them, and a refused export's one line, for the export tests."""

from __future__ import annotations

from pathlib import Path

import torch

from tiedemb.export import main as export


def save_module(path: Path, module: torch.nn.Module, class_path: str, data: dict | None = None, **extra) -> Path:
    """A checkpoint as Lightning writes one: hyperparameters, weights, the data's settings (and ``extra`` entries)."""
    torch.save(
        {
            "hyper_parameters": {**dict(module.hparams), "_class_path": class_path},
            "state_dict": module.state_dict(),
            "datamodule_hyper_parameters": data or {},
            **extra,
        },
        path,
    )
    return path


def refused(capsys, argv: list[str], out: Path) -> str:
    """The one error line of a refused export; nothing is written in OUT."""
    assert export([*argv[:1], str(out), *argv[1:]]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not out.exists() or not any(out.iterdir())
    assert not [path for path in out.parent.iterdir() if path.name.startswith(f".{out.name}-")]  # no staging left
    return lines[0]
