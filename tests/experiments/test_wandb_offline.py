"""The W&B transaction-log reader on a file framed by hand, records split across blocks included."""

from __future__ import annotations

import json
import struct

from wandb.proto import wandb_internal_pb2

from tiedemb.experiments.wandb_offline import BLOCK, metric_series, read_wandb_run


def frame(records: list[bytes]) -> bytes:
    """LevelDB log framing as W&B writes it: 7-byte file header, 32 KiB blocks, typed chunks."""
    data = bytearray(b":W&B" + struct.pack("<H", 0xBEE1) + b"\x00")
    for payload in records:
        first = True
        while True:
            room = BLOCK - len(data) % BLOCK
            if room < 7:
                data += b"\x00" * room
                continue
            size = min(len(payload), room - 7)
            last = size == len(payload)
            kind = (1 if last else 2) if first else (4 if last else 3)
            data += struct.pack("<IHB", 0, size, kind) + payload[:size]
            payload, first = payload[size:], False
            if last:
                break
    return bytes(data)


def history(step: int, **values: float) -> bytes:
    record = wandb_internal_pb2.Record()
    for key, value in {"trainer/global_step": step, "_step": step, **values}.items():
        item = record.history.item.add()
        item.key, item.value_json = key, json.dumps(value)
    return record.SerializeToString()


def test_history_config_and_run_identity_are_read(tmp_path):
    run = wandb_internal_pb2.Record()
    run.run.run_id, run.run.display_name, run.run.run_group = "abc", "tied/seed=0", "smoke"
    run.run.tags.extend(["variant=tied"])
    config = wandb_internal_pb2.Record()
    item = config.config.update.add()
    item.key, item.value_json = "head", json.dumps("tied")
    padding = {f"filler/{i}": float(i) for i in range(3000)}  # one record longer than a block
    records = [
        run.SerializeToString(),
        config.SerializeToString(),
        history(0, **{"init/loss": 15.3}),
        history(5, **padding),
        *(history(step, **{"val/loss": 10.0 - step / 10}) for step in range(10, 60, 10)),
    ]
    path = tmp_path / "run-abc.wandb"
    path.write_bytes(frame(records) + b"\x00" * 5)  # a torn tail is ignored
    parsed = read_wandb_run(path)
    assert (parsed.run_id, parsed.name, parsed.group, parsed.tags) == ("abc", "tied/seed=0", "smoke", ["variant=tied"])
    assert parsed.config["head"] == "tied"
    series = metric_series(parsed)
    assert series["init/loss"] == {0: 15.3}
    assert series["val/loss"] == {10: 9.0, 20: 8.0, 30: 7.0, 40: 6.0, 50: 5.0}
    assert series["filler/2999"] == {5: 2999.0}
