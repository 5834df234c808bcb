"""What a finished ``fit`` says last: its folder, best checkpoint, final metric, time and next commands.

W&B prints its own lines (where the run is kept, how to sync it) when its run finishes, which is
otherwise at the process's exit, after everything tiedemb says. ``finish_wandb`` ends the run first,
so the summary is the last thing on the screen::

    run finished in 0:00:21 (6 steps): runs/orth
      best checkpoint: runs/orth/checkpoints/best.ckpt (val/loss 5.5671, step 6)
      final val/loss: 5.5671
    next:
      tiedemb validate --ckpt_path runs/orth/checkpoints/best.ckpt
      ...

Every file it names exists when it is printed (a run that never validated has a ``last.ckpt`` and no
scored best; a run with checkpointing off has neither and gets no checkpoint lines).
"""

from __future__ import annotations

import datetime
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

from tiedemb.training.checkpoint_io import BEST_NAME
from tiedemb.training.run_dir import CHECKPOINTS


@dataclass
class RunKind:
    """What the next commands depend on: the kind of model, whether it has a tokenizer and an export."""

    kind: str  # "clm", "mlm" or "glue"
    has_tokenizer: bool = True
    exportable: bool = True
    transformers_dir: Path | None = None  # written by fit --save_transformers


def finish_wandb() -> None:
    """End the process's W&B run now, so that W&B's closing lines come before the summary."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is not None:
        run.finish()


def monitored(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The checkpoint callback that scores checkpoints by a metric, else the first one."""
    callbacks = [callback for callback in trainer.checkpoint_callbacks if isinstance(callback, ModelCheckpoint)]
    return next((callback for callback in callbacks if callback.monitor), callbacks[0] if callbacks else None)


def number(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def best_checkpoint(run_dir: Path, callback: ModelCheckpoint | None) -> Path | None:
    """``best.ckpt`` where the run wrote one, else the callback's best file, if it exists."""
    folder = Path(callback.dirpath) if callback is not None and callback.dirpath else run_dir / CHECKPOINTS
    if (folder / BEST_NAME).is_file():
        return folder / BEST_NAME
    best = callback.best_model_path if callback is not None else ""
    return Path(best) if best and Path(best).is_file() else None


def summary_lines(trainer: L.Trainer, run_dir: Path, seconds: float, run: RunKind) -> list[str]:
    """The lines ``say_summary`` prints (see the module's text)."""
    wall = datetime.timedelta(seconds=round(seconds))
    lines = [f"run finished in {wall} ({trainer.global_step} steps): {run_dir}"]
    callback = monitored(trainer)
    best = best_checkpoint(run_dir, callback)
    metric = callback.monitor if callback is not None else None
    folder = Path(callback.dirpath) if callback is not None and callback.dirpath else run_dir / CHECKPOINTS
    last = folder / "last.ckpt"
    last = last if last.is_file() else None
    if best is not None:
        score = callback.best_model_score if callback is not None else None
        scored = f" ({metric} {number(score)})" if metric and score is not None else " (the newest state: not scored)"
        lines.append(f"  best checkpoint: {best}{scored}")
    elif last is not None:
        lines.append(f"  newest checkpoint: {last}")
    else:
        lines.append("  no checkpoint was written (checkpointing is off)")
    final = trainer.callback_metrics.get(metric) if metric else None
    if final is not None:
        lines.append(f"  final {metric}: {number(final)}")
    if run.transformers_dir is not None and run.transformers_dir.is_dir():
        lines.append(f"  transformers folder: {run.transformers_dir}")
    chosen = best or last
    if chosen is None:
        return lines
    lines.append("next:")
    if run.kind == "glue":
        lines.append(f"  tiedemb test --ckpt_path {chosen}")
        lines.append(f"  tiedemb predict {run_dir} --input pairs.tsv")
    else:
        lines.append(f"  tiedemb validate --ckpt_path {chosen}")
    if run.exportable and (run.transformers_dir is None or not run.transformers_dir.is_dir()):
        tokenizer = "" if run.has_tokenizer else " --no-tokenizer"
        lines.append(f"  tiedemb export {chosen} exported/{run_dir.name}{tokenizer}")
    if last is not None:
        lines.append(f"  train on: the same fit command with --ckpt_path {last} and a higher --trainer.max_steps")
    return lines


def say_summary(lines: list[str], finish: bool = True) -> None:
    """Print the summary on stderr; with ``finish``, W&B's run is finished first (its lines before)."""
    if finish:
        finish_wandb()
    print("\n".join(lines), file=sys.stderr)
