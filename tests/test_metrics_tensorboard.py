"""TensorBoard after a resume holds every step once, as metrics.jsonl does (issue 49: the first step after a resume
was lost, purge_step one step early).

The events are read as TensorBoard reads them (its event_accumulator): records of the TFRecord format, and a
SessionLog START at step S drops every event of step >= S seen so far (how a restarted writer tells readers to
forget what it will write again). tensorboard itself is not installed here, so the reader is written out below.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from tensorboardX.proto import event_pb2

from spade_jax.rundir.metrics import MetricsLogger, read_metrics


def _records(path: Path):
    data = path.read_bytes()
    i = 0
    while i + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[i : i + 8])  # length, its CRC (4 bytes), the record, its CRC (4 bytes)
        event = event_pb2.Event()
        event.ParseFromString(data[i + 12 : i + 12 + n])
        yield event
        i += 12 + n + 4


def tensorboard_steps(tb: Path, tag: str) -> list[int]:
    """The steps TensorBoard shows for `tag`, reading the event files in the order they were written."""
    seen: dict[int, float] = {}
    for f in sorted(tb.glob("events.out.tfevents.*"), key=lambda p: (int(p.name.split(".")[3]), p.name)):
        for event in _records(f):
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                seen = {s: v for s, v in seen.items() if s < event.step}
            for value in event.summary.value:
                if value.tag == tag:
                    seen[event.step] = value.simple_value
    return sorted(seen)


def test_a_resume_keeps_every_step_in_tensorboard(tmp_path: Path) -> None:
    first = MetricsLogger(tmp_path)
    for step in (1, 2, 3):  # step 3 was logged, but the run died before its checkpoint: it is redone
        first.log(step, {"train/loss": float(step)})
    first.close()
    time.sleep(1.05)  # tensorboardX names its event file by the second: a second writer in the same one overwrites
    resumed = MetricsLogger(tmp_path, resume_step=2)  # the checkpoint of step 2 restored
    for step in (3, 4):
        resumed.log(step, {"train/loss": 10.0 + step})
    resumed.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert tensorboard_steps(tmp_path / "tb", "train/loss") == [1, 2, 3, 4]
