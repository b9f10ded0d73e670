"""Framing between the host (`protocol.py`) and the sandbox side's own copy (`episode.py`): both sides agree, and
every read or write is bounded in time and size."""

from __future__ import annotations

import os
import threading
import time

import pytest

from spade_jax.sandbox import protocol
from spade_jax.sandbox.inside import episode, worker


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_host_frames_parse_in_worker(pipe):
    r, w = pipe
    msg = {"op": "call", "method": "step", "args": ["\\boxed{ü}", None, 1.5, [1, {"a": True}]]}
    os.write(w, protocol.encode(msg))
    raw = episode.recv_raw(r, 1 << 20, time.monotonic() + 1)
    assert raw is not None and __import__("json").loads(raw) == msg


def test_worker_frames_parse_on_host(pipe):
    r, w = pipe
    reply = {"ok": True, "value": ["obs", 1.0, False, True, {"k": [1, 2]}]}
    episode.send(w, reply)
    assert protocol.FrameReader(r).read(time.monotonic() + 1, 1 << 20) == reply


def test_reader_assembles_frames_split_in_pieces(pipe):
    r, w = pipe
    data = protocol.encode({"x": "y" * 5000}) + protocol.encode([1, 2])

    def trickle():
        for i in range(0, len(data), 777):
            os.write(w, data[i : i + 777])
            time.sleep(0.001)

    t = threading.Thread(target=trickle)
    t.start()
    reader = protocol.FrameReader(r)
    assert reader.read(time.monotonic() + 5, 1 << 20) == {"x": "y" * 5000}
    assert reader.read(time.monotonic() + 5, 1 << 20) == [1, 2]
    t.join()


def test_reader_times_out_on_silence(pipe):
    r, _ = pipe
    t0 = time.monotonic()
    with pytest.raises(protocol.ChannelError) as e:
        protocol.FrameReader(r).read(time.monotonic() + 0.2, 100)
    assert e.value.kind == "timeout" and time.monotonic() - t0 < 1.0


def test_reader_times_out_on_a_half_frame(pipe):
    r, w = pipe
    os.write(w, protocol.encode("hello")[:6])
    with pytest.raises(protocol.ChannelError) as e:
        protocol.FrameReader(r).read(time.monotonic() + 0.2, 100)
    assert e.value.kind == "timeout"


def test_reader_reports_closed_channel(pipe):
    r, w = pipe
    os.close(w)
    with pytest.raises(protocol.ChannelError) as e:
        protocol.FrameReader(r).read(time.monotonic() + 1, 100)
    assert e.value.kind == "closed"


def test_reader_refuses_oversized_frame_without_reading_it(pipe):
    r, w = pipe
    os.write(w, b"\xff\xff\xff\xff")  # claims 4 GiB
    with pytest.raises(protocol.ChannelError) as e:
        protocol.FrameReader(r).read(time.monotonic() + 1, 1 << 16)
    assert e.value.kind == "garbage" and "4294967295" in str(e.value)


@pytest.mark.parametrize("body", [b"{not json", b'{"v": NaN}', b"[Infinity]", b"\xff\xfe"])
def test_reader_rejects_malformed_bodies(pipe, body):
    r, w = pipe
    os.write(w, protocol.HEADER.pack(len(body)) + body)
    with pytest.raises(protocol.ChannelError) as e:
        protocol.FrameReader(r).read(time.monotonic() + 1, 100)
    assert e.value.kind == "garbage"


def test_encode_refuses_non_json():
    for bad in ({"x": float("nan")}, {"x": object()}, {1, 2}):
        with pytest.raises((TypeError, ValueError)):
            protocol.encode(bad)


def test_write_never_blocks_past_deadline(pipe):
    _, w = pipe  # nobody reads: the pipe buffer (64 KiB) fills up
    t0 = time.monotonic()
    with pytest.raises(protocol.ChannelError) as e:
        protocol.write_frame(w, b"x" * (1 << 20), time.monotonic() + 0.3)
    assert e.value.kind == "timeout" and time.monotonic() - t0 < 1.5


def test_write_to_dead_reader_is_closed(pipe):
    r, w = pipe
    os.close(r)
    with pytest.raises(protocol.ChannelError) as e:
        protocol.write_frame(w, protocol.encode("x"), time.monotonic() + 1)
    assert e.value.kind == "closed"


def test_worker_recv_enforces_limit_and_deadline(pipe):
    r, w = pipe
    os.write(w, protocol.encode("z" * 100))
    with pytest.raises(ValueError):
        episode.recv_raw(r, 50)
    r2, w2 = os.pipe()
    try:
        with pytest.raises(TimeoutError):
            episode.recv_raw(r2, 50, time.monotonic() + 0.1)
    finally:
        os.close(r2)
        os.close(w2)


@pytest.mark.parametrize(
    "body,ok",
    [
        (b'{"ok": true, "value": [1]}', True),
        (b'{"ok": false, "error": "exception", "message": "x"}', True),
        (b'{"ok": true, "value": NaN}', False),
        (b'{"ok": false, "error": "root-shell"}', False),
        (b"[1, 2]", False),
        (b'{"ok": "yes"}', False),
        (b"\x00\x01", False),
    ],
)
def test_zygote_validates_episode_replies(body, ok):
    assert (worker._check_reply(body) == "") is ok
