"""``fit --save_transformers``: the finished run's model as a transformers folder beside its checkpoints.

The export is ``tiedemb export`` itself (``tiedemb/export.py``: the layout, the tokenizer, the model
card, a folder written whole or not at all), run on the run's best checkpoint in a process of its
own, after training: the command sits above the training code, which does not import it. Whether the
model fits a transformers class at all is checked before training (``cli.py``), so a run is not
trained for an export that would be refused at its end. A failed export costs a line, not the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TRANSFORMERS_FOLDER = "transformers"
"""The folder in the run's folder that ``--save_transformers`` writes."""


def export_beside(checkpoint: Path, run_dir: Path, has_tokenizer: bool) -> tuple[Path | None, str]:
    """Export ``checkpoint`` to ``<run_dir>/transformers``; the folder (None if it failed) and what was said."""
    out = run_dir / TRANSFORMERS_FOLDER
    command = [sys.executable, "-m", "tiedemb.export", str(checkpoint), str(out)]
    if not has_tokenizer:
        command.append("--no-tokenizer")
    # The same tiedemb as this process's, installed or not: its package's parent goes first on the path.
    package_root = str(Path(__file__).resolve().parents[2])  # tiedemb/training/fit_export.py
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    said = (result.stdout + result.stderr).strip().splitlines()
    if result.returncode != 0:
        reason = next((line for line in said if line.startswith("error:")), said[-1] if said else "")
        return None, f"the transformers folder was not written: {reason.removeprefix('error: ')}"
    return out, said[-1] if said else f"wrote {out}"
