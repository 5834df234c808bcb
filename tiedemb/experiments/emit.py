"""The same sweep for clusters: a SLURM job array, or W&B sweep configurations for ``wandb agent``.

A W&B sweep is a grid over the study's cells, or a random or Bayesian search (the study's
``search`` section, or ``--method``/``--metric``): the grid's axes are then categorical
parameters, and the search's parameters are drawn from their distributions and passed to the
cell as overrides (``tiedemb.experiments.sweep_file.searched_cell``).

Both hand each job one cell of the sweep file and run it with ``python -m tiedemb.sweep``, so a
job writes the same folder, status and metrics as a local run, and skips a finished cell.

Time limits: the job array asks SLURM for SIGUSR1 two minutes before a task's time limit; the task's
sweep process then stops the running stage after its current step (it saves its state there) and
requeues the task, which resumes the cell when it runs again (``tiedemb.experiments.requeue``).

Chained studies: a job of a chained cell whose upstream cell has not finished exits at once
(status 0) saying which cell it waits for, and the cell is recorded as waiting. So the jobs of
chained cells are run by a second submission after the first has ended (for SLURM, at once with
``sbatch --dependency=afterany:<first job id>``; for W&B, the chained study's sweep started after
the upstream study's sweep), which skips the finished cells and runs the waiting ones.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from tiedemb.experiments.sweep_file import Search, Sweep, check_search

SLURM_DEFAULTS: dict[str, object] = {
    "time": "24:00:00",
    "cpus-per-task": 8,
    # Two minutes before the time limit SLURM sends SIGUSR1 to the batch shell, i.e. to the sweep (exec-ed
    # below), which stops the running stage after its current step, saves it and requeues the task
    # (tiedemb.experiments.requeue); the requeued task resumes the cell from that checkpoint.
    "signal": "B:USR1@120",
    "requeue": True,
    # the requeued task writes the same %A_%a.log: appended to, not truncated
    "open-mode": "append",
}
"""``#SBATCH`` settings of every job array.

A sweep file's ``slurm:`` section overrides them (``false`` drops a flag).
"""


def slurm_script(sweep: Sweep, out: Path, workdir: Path, set_flags: Sequence[str] = ()) -> str:
    """A job-array script: array task i runs cell i (``--cell i``); logs go to ``OUT/slurm``.

    SLURM opens the log files before the script runs, so the caller creates ``OUT/slurm``.
    ``set_flags``: the sweep command's ``--set KEY=VALUE`` values, passed on to every task.
    """
    cells = sweep.all_cells
    settings = {**SLURM_DEFAULTS, **{str(key).replace("_", "-"): value for key, value in sweep.slurm.items()}}
    lines = [
        "#!/bin/bash",
        f"# tiedemb sweep {sweep.name!r}: {len(cells)} cells, one per array task. Submit with: sbatch {{this file}}",
        f"# generated from {sweep.path.resolve()}",
        "# Near the time limit a task saves its cell's state, requeues itself and resumes there when it runs again",
        "# (--signal, --requeue below); a task killed without warning resumes from the cell's last checkpoint.",
        *(
            f"#   {cell.index:>4}  {cell.id}{f'  <- {cell.upstream.cell.id}' if cell.upstream else ''}"
            for cell in cells
        ),
        *_slurm_chain_note(sweep),
        f"#SBATCH --job-name=tiedemb-{sweep.name}",
        f"#SBATCH --array=0-{len(cells) - 1}",
        f"#SBATCH --output={out.resolve() / 'slurm' / '%A_%a.log'}",
        *(_sbatch_line(key, value) for key, value in settings.items() if value is not False),
        "",
        "set -euo pipefail",
        f"cd {shlex.quote(str(workdir.resolve()))}",
        # W&B runs record offline on nodes without network; `wandb sync OUT/*/*/wandb` uploads them.
        'export WANDB_MODE="${WANDB_MODE:-offline}"',
        f"exec {shlex.quote(sys.executable)} -m tiedemb.sweep {shlex.quote(str(sweep.path.resolve()))} "
        f'--out {shlex.quote(str(out.resolve()))} --cell "$SLURM_ARRAY_TASK_ID"'
        + "".join(f" --set {shlex.quote(flag)}" for flag in set_flags),
        "",
    ]
    return "\n".join(lines)


def _sbatch_line(key: str, value: object) -> str:
    """``#SBATCH --key=value``, or ``#SBATCH --key`` for a flag set to ``true`` (``requeue``)."""
    return f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={value}"


def _slurm_chain_note(sweep: Sweep) -> list[str]:
    """Comment lines telling how to run chained cells (marked ``<- upstream`` above)."""
    depth = max(study.depth for study in sweep.studies)
    if depth == 0:
        return []
    return [
        "# Chained studies: a task marked '<- cell' starts from that cell's checkpoint. While that cell has",
        "# not finished, the task exits at once (status 0) saying which cell it waits for. So submit this",
        "# file again when the first array has ended, or at once with a dependency:",
        "#   sbatch --dependency=afterany:<job id of the first array> {this file}",
        f"# The second array skips finished cells and runs the waiting ones ({depth + 1} submissions in all:",
        "# one per level of chaining).",
    ]


def wandb_sweep_configs(
    sweep: Sweep,
    out: Path,
    set_flags: Sequence[str] = (),
    method: str | None = None,
    metric: tuple[str, str] | None = None,
) -> dict[str, str]:
    """One W&B sweep configuration per study (YAML text by study name).

    The agent passes one value per axis label (``--variant=tied --seed=0``) and, for a random or
    Bayesian search, one per searched CLI key (``--model.learning_rate=0.0012``); ``tiedemb.sweep``
    maps them back to the cell, which logs into the agent's W&B run. ``method`` and ``metric``
    replace each study's own (``--method``, ``--metric``). A chained study's sweep is to be started
    after its upstream study's sweep has finished (its description says so).
    """
    configs = {}
    for study in sweep.studies:
        search = Search(
            method=method or study.search.method,
            metric=metric or study.search.metric,
            parameters=study.search.parameters,
            run_cap=study.search.run_cap,
        )
        check_search(search, f"study {study.name!r} of sweep file {str(sweep.path)!r}")
        values: dict[str, list[str]] = {}
        for cell in study.cells:
            for label, value in cell.labels.items():
                values.setdefault(label, [])
                if value not in values[label]:
                    values[label].append(value)
        description = sweep.description or f"tiedemb sweep {sweep.name}, study {study.name}"
        if study.chain is not None:
            description += (
                f". Start after the sweep of study {study.chain.study!r} has finished: a cell whose "
                "upstream cell has not finished exits without running, as waiting"
            )
        config = {
            "name": f"{sweep.name}/{study.name}",
            "description": description,
            "project": (sweep.wandb or {}).get("project", "tiedemb"),
            "method": search.method,
            "program": "tiedemb/sweep.py",
            "command": [
                "${env}",
                "${interpreter}",
                "-m",
                "tiedemb.sweep",
                str(sweep.path.resolve()),
                "--out",
                str(out.resolve()),
                "--study",
                study.name,
                *(part for flag in set_flags for part in ("--set", flag)),
                "${args}",
            ],
        }
        if search.metric is not None:
            config["metric"] = {"name": search.metric[0], "goal": search.metric[1]}
        config["parameters"] = {
            **{label: {"values": levels} for label, levels in values.items()},
            **{key: dict(distribution) for key, distribution in search.parameters.items()},
        }
        if search.run_cap is not None:
            config["run_cap"] = search.run_cap
        if (sweep.wandb or {}).get("entity"):
            config["entity"] = sweep.wandb["entity"]
        configs[study.name] = yaml.safe_dump(config, sort_keys=False)
    return configs
