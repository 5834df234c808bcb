"""The same sweep for clusters: a SLURM job array, or W&B sweep configurations for ``wandb agent``.

Both hand each job one cell of the sweep file and run it with ``python -m tiedemb.sweep``, so a
job writes the same folder, status and metrics as a local run, and skips a finished cell.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import yaml

from tiedemb.experiments.sweep_file import Sweep

SLURM_DEFAULTS = {"time": "24:00:00", "cpus-per-task": 8}


def slurm_script(sweep: Sweep, out: Path, workdir: Path) -> str:
    """A job-array script: array task i runs cell i (``--cell i``); logs go to ``OUT/slurm``.

    SLURM opens the log files before the script runs, so the caller creates ``OUT/slurm``.
    """
    cells = sweep.all_cells
    settings = {**SLURM_DEFAULTS, **{str(key).replace("_", "-"): value for key, value in sweep.slurm.items()}}
    lines = [
        "#!/bin/bash",
        f"# tiedemb sweep {sweep.name!r}: {len(cells)} cells, one per array task. Submit with: sbatch {{this file}}",
        f"# generated from {sweep.path.resolve()}",
        *(f"#   {cell.index:>4}  {cell.id}" for cell in cells),
        f"#SBATCH --job-name=tiedemb-{sweep.name}",
        f"#SBATCH --array=0-{len(cells) - 1}",
        f"#SBATCH --output={out.resolve() / 'slurm' / '%A_%a.log'}",
        *(f"#SBATCH --{key}={value}" for key, value in settings.items()),
        "",
        "set -euo pipefail",
        f"cd {shlex.quote(str(workdir.resolve()))}",
        # W&B runs record offline on nodes without network; `wandb sync OUT/*/*/wandb` uploads them.
        'export WANDB_MODE="${WANDB_MODE:-offline}"',
        f"exec {shlex.quote(sys.executable)} -m tiedemb.sweep {shlex.quote(str(sweep.path.resolve()))} "
        f"--out {shlex.quote(str(out.resolve()))} --cell \"$SLURM_ARRAY_TASK_ID\"",
        "",
    ]
    return "\n".join(lines)


def wandb_sweep_configs(sweep: Sweep, out: Path) -> dict[str, str]:
    """One W&B grid-sweep configuration per study (YAML text by study name).

    The agent passes one value per axis label (``--variant=tied --seed=0``); ``tiedemb.sweep``
    maps them back to the cell, which logs into the agent's W&B run.
    """
    configs = {}
    for study in sweep.studies:
        values: dict[str, list[str]] = {}
        for cell in study.cells:
            for label, value in cell.labels.items():
                values.setdefault(label, [])
                if value not in values[label]:
                    values[label].append(value)
        config = {
            "name": f"{sweep.name}/{study.name}",
            "description": sweep.description or f"tiedemb sweep {sweep.name}, study {study.name}",
            "project": (sweep.wandb or {}).get("project", "tiedemb"),
            "method": "grid",
            "program": "tiedemb/sweep.py",
            "command": ["${env}", "${interpreter}", "-m", "tiedemb.sweep", str(sweep.path.resolve()),
                        "--out", str(out.resolve()), "--study", study.name, "${args}"],
            "parameters": {label: {"values": levels} for label, levels in values.items()},
        }
        if (sweep.wandb or {}).get("entity"):
            config["entity"] = sweep.wandb["entity"]
        configs[study.name] = yaml.safe_dump(config, sort_keys=False)
    return configs
