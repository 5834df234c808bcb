"""What a W&B run recorded, for the tests that check it: its local transaction log (``run-<id>.wandb``).

tiedemb itself never reads this file (reports read the CSV metrics Lightning writes); the tests
read it to see what an offline run handed to W&B, with no server, through W&B's internal record
format (``wandb.proto``), which may change in any W&B release: where it is gone, those tests skip.

Every W&B run, offline or online, writes this file in its run folder. It is a sequence of
protobuf ``Record`` messages framed in LevelDB's log format: a 7-byte file header (``:W&B``, a
two-byte magic number, a version byte), then 32 KiB blocks of chunks, each with a 7-byte header
(CRC-32, little-endian length, type: 1 full, 2 first, 3 middle, 4 last). The record types used
here are ``history`` (one logged row), ``config``, ``run`` and ``artifact`` (an artifact the run
logged, e.g. a checkpoint: its files' digests and sizes; the files themselves are staged apart).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE_HEADER = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
STEP_KEYS = ("trainer/global_step", "_step")


@dataclass
class WandbRun:
    path: Path
    run_id: str = ""
    name: str = ""
    group: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[LoggedArtifact] = field(default_factory=list)


@dataclass
class LoggedArtifact:
    type: str
    name: str
    aliases: list[str]
    metadata: dict[str, Any]
    files: dict[str, tuple[str, int]]  # path in the artifact -> (base64 MD5, size in bytes)


def records(path: str | Path) -> Iterator[bytes]:
    """The payload of every complete record in the file; a torn final record is dropped."""
    data = Path(path).read_bytes()
    if not data.startswith(b":W&B"):
        raise ValueError(f"{path} is not a W&B transaction log")
    position, pending = FILE_HEADER, b""
    while position + CHUNK_HEADER <= len(data):
        room = BLOCK - position % BLOCK
        if room < CHUNK_HEADER:  # a block's unusable tail is zero padding
            position += room
            continue
        _, length, kind = struct.unpack_from("<IHB", data, position)
        if kind == 0 and length == 0:  # preallocated zeros: skip to the next block
            position += room
            continue
        chunk = data[position + CHUNK_HEADER : position + CHUNK_HEADER + length]
        position += CHUNK_HEADER + length
        if len(chunk) < length:
            return
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_wandb_run(path: str | Path) -> WandbRun:
    """History rows, config and identity of the run whose transaction log is ``path``."""
    import pytest

    wandb_internal_pb2 = pytest.importorskip("wandb.proto.wandb_internal_pb2")

    run = WandbRun(path=Path(path))
    for payload in records(path):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception:
            continue
        kind = record.WhichOneof("record_type")
        if kind == "history":
            run.history.append(
                {item.key or "/".join(item.nested_key): _value(item.value_json) for item in record.history.item}
            )
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key or "/".join(item.nested_key)] = _value(item.value_json)
        elif kind == "artifact":
            artifact = record.artifact
            run.artifacts.append(
                LoggedArtifact(
                    type=artifact.type,
                    name=artifact.name,
                    aliases=list(artifact.aliases),
                    metadata=_value(artifact.metadata) if artifact.metadata else {},
                    files={entry.path: (entry.digest, entry.size) for entry in artifact.manifest.contents},
                )
            )
        elif kind == "run":
            run.run_id, run.name = record.run.run_id, record.run.display_name
            run.group, run.tags = record.run.run_group, list(record.run.tags)
            for item in record.run.config.update:
                run.config[item.key or "/".join(item.nested_key)] = _value(item.value_json)
    return run


def metric_series(run: WandbRun) -> dict[str, dict[int, float]]:
    """metric -> {trainer step: value}, as the CSV logger would have written them."""
    series: dict[str, dict[int, float]] = {}
    for row in run.history:
        step = next((row[key] for key in STEP_KEYS if isinstance(row.get(key), (int, float))), None)
        if step is None:
            continue
        for name, value in row.items():
            if name.startswith("_") or name in STEP_KEYS or name == "epoch" or not isinstance(value, (int, float)):
                continue
            series.setdefault(name, {})[int(step)] = float(value)
    return series
