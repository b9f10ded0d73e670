"""Weights & Biases as a logger beside TensorBoard (`logger=wandb`), in offline mode: the real wandb package writes
its run file under the run directory, and the test reads that file back itself.

The .wandb file is W&B's transaction log: a 7-byte header (":W&B", magic, version), then LevelDB-log records
(4-byte checksum, 2-byte length, 1-byte type: full, first, middle, last) in 32 KiB blocks, each record a protobuf
`Record`; a history record holds one logged row as (key, JSON value) items. No network is used.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

wandb = pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402

from spade_jax.rundir.metrics import MetricsLogger  # noqa: E402
from spade_jax.rundir.wandb_sink import check_wandb  # noqa: E402

BLOCK = 32 * 1024


def _records(path: Path):
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        parts = chunk if kind in (1, 2) else parts + chunk  # full / first start a record
        if kind in (1, 4):  # full / last end it
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record


def _history(run_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        for record in _records(path):
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})  # fmt: skip
    return rows


def test_offline_wandb_gets_every_row_and_a_resume_continues_the_same_run(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    settings = {"project": "spade-test", "mode": "offline", "tags": ("t",)}
    first = MetricsLogger(tmp_path, wandb=settings, config={"learner": {"lr": 1e-5}})
    for step in (1, 2):
        first.log(step, {"train/loss": 1.0 / step, "eval/win_rate": 0.25 * step})
    first.close()
    run_id = (tmp_path / "wandb_id").read_text().strip()
    resumed = MetricsLogger(tmp_path, resume_step=2, wandb=settings, config={"learner": {"lr": 1e-5}})
    resumed.log(3, {"train/loss": 1.0 / 3})
    resumed.close()

    assert (tmp_path / "wandb_id").read_text().strip() == run_id, "the resume continues the same W&B run"
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.name.endswith(run_id) for r in runs)
    rows = [r for r in _history(tmp_path) if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["train/loss"] for r in rows] == pytest.approx([1.0, 0.5, 1 / 3])
    assert rows[1]["eval/win_rate"] == pytest.approx(0.5)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_online_mode_without_a_key_is_refused_before_the_run(tmp_path, monkeypatch) -> None:
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(ValueError, match="needs a W&B API key"):
        check_wandb({"mode": "online"})
    check_wandb({"mode": "offline"})
    monkeypatch.setenv("WANDB_MODE", "offline")  # the machine's override, as for any W&B script
    check_wandb({"mode": "online"})
