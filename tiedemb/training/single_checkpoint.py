"""Checkpoints from any strategy made into one file that loads on a single device, tie intact.

``python -m tiedemb.consolidate CHECKPOINT OUTPUT`` (the command's documented name) runs ``main``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

import torch

from tiedemb.errors import UserError
from tiedemb.nn.heads import HEADS
from tiedemb.options import add_weights_only
from tiedemb.training.checkpoints import read_checkpoint
from tiedemb.training.exits import CommandParser, report_user_errors
from tiedemb.training.ties import restore_tied_entries, tied_prefixes_in


def _is_deepspeed_checkpoint(path: Path) -> bool:
    return path.is_dir() and ((path / "latest").is_file() or (path / "checkpoint").is_dir())


def _is_sharded_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / "meta.pt").is_file()


LIGHTNING_CONSOLIDATE = "lightning.pytorch.utilities.consolidate_checkpoint"
"""Lightning's command that gathers an FSDP sharded checkpoint folder into one Trainer checkpoint file."""


def _consolidated_by_lightning(folder: Path, scratch: Path, weights_only: bool) -> dict:
    """The checkpoint in a sharded ``folder``, as Lightning's documented command writes it.

    Lightning offers the gathering only as a command (``python -m
    lightning.pytorch.utilities.consolidate_checkpoint FOLDER --output_file FILE``): it runs in a
    child process, writing into a scratch folder beside the output, read back whole (not mapped)
    before that folder goes.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix=".consolidating-") as work:
        gathered = Path(work) / "gathered.ckpt"
        done = subprocess.run(
            [sys.executable, "-m", LIGHTNING_CONSOLIDATE, str(folder), "--output_file", str(gathered)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not gathered.is_file():
            reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise UserError(f"{folder} could not be consolidated by Lightning ({reason})")
        return torch.load(gathered, map_location="cpu", weights_only=weights_only)


def consolidate_checkpoint(path: str | Path, output: str | Path, weights_only: bool = True) -> Path:
    """Write the checkpoint at ``path`` (a file, an FSDP sharded folder or a DeepSpeed folder) as
    one ``.ckpt`` file that loads on a single device, with the tied matrix under both its names.

    ``output`` must not exist: the command never replaces a file (it may be the input itself, or
    a checkpoint from another run). A single file is read as the training command reads one,
    tensors and plain values only unless ``weights_only`` is false.
    """
    path, output = Path(path), Path(output)
    if output.exists():
        raise UserError(
            f"output {str(output)!r} already exists; the consolidated checkpoint is never written "
            "over a file: pass a new path"
        )
    if _is_deepspeed_checkpoint(path):
        if importlib.util.find_spec("deepspeed") is None:
            raise UserError(f"{path} is a DeepSpeed checkpoint; consolidating it needs `pip install deepspeed`")
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        # Gathers every rank's partition into fp32 tensors, on the CPU.
        convert_zero_checkpoint_to_fp32_state_dict(str(path), str(output))
        checkpoint = torch.load(output, map_location="cpu", weights_only=False)
    elif _is_sharded_checkpoint(path):
        checkpoint = _consolidated_by_lightning(path, output.parent, weights_only)
    elif path.is_file():
        checkpoint = read_checkpoint(path, weights_only=weights_only)
    else:
        raise UserError(f"{path} is neither a checkpoint file nor a sharded FSDP or DeepSpeed checkpoint folder")
    state_dict = checkpoint.get("state_dict")
    if not isinstance(state_dict, MutableMapping):
        raise UserError(f"{path} holds no model state_dict")
    # Only checkpoints whose hyperparameters name a tied head: a GLUE classifier has an embedding
    # and no output head, an untied model two different matrices.
    head = (checkpoint.get("hyper_parameters") or {}).get("head")
    if head is not None and not (head in HEADS and not HEADS[head].tied):
        restore_tied_entries(state_dict, tied_prefixes_in(state_dict))
    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, output)
    return output


def parser() -> CommandParser:
    parser = CommandParser(
        prog="tiedemb consolidate",
        description="Turn a checkpoint from any strategy (DDP/FSDP file, FSDP sharded folder, DeepSpeed "
        "folder) into one .ckpt file for PretrainModule.load_from_checkpoint on a single device.",
    )
    parser.add_argument("checkpoint", help="checkpoint file or folder")
    parser.add_argument("output", help="the single-file checkpoint to write (a new path)")
    add_weights_only(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    written = report_user_errors(lambda: consolidate_checkpoint(args.checkpoint, args.output, args.weights_only))
    if isinstance(written, int):
        return written
    print(written)
    return 0
