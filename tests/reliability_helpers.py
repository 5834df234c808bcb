"""Callbacks the reliability tests put into real command-line runs (``--trainer.callbacks+=...``).

Importable as ``reliability_helpers`` because pytest puts this folder on ``sys.path``;
subprocesses get it through ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback


class SimulatedCrash(RuntimeError):
    """Stands for whatever ends a run abruptly (preemption, out of memory, a node failure)."""


class StopAt(Callback):
    """Ends the run just before training step ``step`` + 1: by an exception, by SIGKILL (no cleanup at
    all), or by SIGTERM (what a cluster sends before it kills a job: Lightning finishes the step)."""

    def __init__(self, step: int, sigkill: bool = False, sigterm: bool = False) -> None:
        self.step = step
        self.sigkill = sigkill
        self.sigterm = sigterm

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            if self.sigkill:
                os.kill(os.getpid(), signal.SIGKILL)
            if self.sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            raise SimulatedCrash(f"stopped before step {self.step + 1}")


class SigtermInValidation(Callback):
    """Sends this process SIGTERM as the first batch of the validation after step ``step`` starts."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if trainer.global_step == self.step and not trainer.sanity_checking and batch_idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)


class FirstStep(Callback):
    """Records the global step a run's first training batch starts at (0, or where it resumed)."""

    def __init__(self) -> None:
        self.first_step: int | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        if self.first_step is None:
            self.first_step = trainer.global_step


class PoisonWeightsAt(Callback):
    """Makes one weight NaN at the end of step ``step``, as a diverging update would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.parameters()).view(-1)[0] = float("nan")


class HangInCheckpointWriteAfter(Callback):
    """After step ``step``, the next write of a ``last*.ckpt`` stalls half-way (then the test kills the process).

    It writes the first half of the real file and touches ``marker`` so the test knows the
    write is in progress. Other checkpoint files are written normally.
    """

    def __init__(self, step: int, marker: str) -> None:
        self.step = step
        self.marker = marker

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if trainer.global_step != self.step:
            return
        real_save = torch.save

        def stalling_save(obj, file, *args, **kwargs) -> None:
            import io

            if ".last" not in Path(getattr(file, "name", str(file))).name:
                return real_save(obj, file, *args, **kwargs)
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            file.write(data[: len(data) // 2])
            file.flush()
            Path(self.marker).touch()
            time.sleep(600)

        torch.save = stalling_save


def run_command_lines(cases_file: str, results_file: str) -> None:
    """Run ``main.py`` once per case in this one interpreter, as ``python main.py ARGS`` would.

    A case whose arguments start with ``-m MODULE`` runs that module instead, as
    ``python -m MODULE ARGS`` would.

    Each case gets fresh ``sys.argv``; its stdout and stderr are captured at the file
    descriptor level, and an exception escaping ``main.py`` is printed and exits 1 exactly as
    the interpreter does. Importing tiedemb once instead of per case saves seconds each.
    """
    import json
    import runpy
    import sys
    import tempfile
    import traceback

    cases = json.loads(Path(cases_file).read_text())
    main_py = str(Path(__file__).resolve().parents[1] / "main.py")
    results = {}
    for name, args in cases.items():
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            module = args[1] if args[:1] == ["-m"] else None
            sys.argv = [module, *args[2:]] if module else ["main.py", *args]
            try:
                if module:
                    sys.modules.pop(module, None)  # imported by an earlier case: run a fresh copy, as python -m does
                    runpy.run_module(module, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(main_py, run_name="__main__")
                code = 0
            except SystemExit as exited:
                code = exited.code if isinstance(exited.code, int) else (0 if exited.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            out.seek(0)
            err.seek(0)
            results[name] = {"returncode": code, "stdout": out.read(), "stderr": err.read()}
    Path(results_file).write_text(json.dumps(results))


def run_command_lines_in_two_processes(
    cases: dict[str, list[str]], work: Path, scratch: Path, timeout: int = 900
) -> dict[str, dict]:
    """``run_command_lines`` over ``cases`` split between two subprocesses started together.

    The runs start in ``work``; the case and result files go to ``scratch``. Each result is
    ``{"returncode", "stdout", "stderr"}`` under its case's name. One thread each, offline.
    """
    import json
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    helpers = Path(__file__).parent
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONPATH": os.pathsep.join([str(helpers.parent), str(helpers), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("TIEDEMB_DEBUG", None)
    names = list(cases)

    def run(index: int) -> dict:
        cases_file, results_file = scratch / f"cases{index}.json", scratch / f"results{index}.json"
        cases_file.write_text(json.dumps({name: cases[name] for name in names[index::2]}))
        finished = subprocess.run(
            [sys.executable, "-m", "reliability_helpers", str(cases_file), str(results_file)],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        assert finished.returncode == 0, finished.stderr[-3000:]
        return json.loads(results_file.read_text())

    with ThreadPoolExecutor(max_workers=2) as pool:
        return {name: result for share in pool.map(run, range(2)) for name, result in share.items()}


if __name__ == "__main__":
    import sys

    run_command_lines(sys.argv[1], sys.argv[2])


def every_n_steps_checkpoint(n: int) -> str:
    """A second checkpoint callback that saves last.ckpt right after every n-th step (not at validation)."""
    return "--trainer.callbacks+=" + json.dumps(
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"every_n_train_steps": n, "save_top_k": 0, "save_last": True},
        }
    )


def sigterm_in_validation(step: int) -> str:
    return "--trainer.callbacks+=" + json.dumps(
        {"class_path": "reliability_helpers.SigtermInValidation", "init_args": {"step": step}}
    )


def stop_at(step: int, sigkill: bool = False, sigterm: bool = False) -> str:
    return "--trainer.callbacks+=" + json.dumps(
        {
            "class_path": "reliability_helpers.StopAt",
            "init_args": {"step": step, "sigkill": sigkill, "sigterm": sigterm},
        }
    )
