"""Host side of the worker channel: length-prefixed JSON frames over pipes, with deadlines and size caps.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON. The sandbox side
(`spade_jax.sandbox.inside.episode`, stdlib only, which may import nothing of ours) carries its own copy of the few
framing lines; `tests/test_pool_protocol.py` checks that both sides agree. Every read has a deadline and a
byte cap so a hung or hostile worker can only cost the host one call's timeout.

Everything a frame carries was written by (or forged from inside) an untrusted episode, so the host decodes it
into plain data only: `clean_value` makes every string valid UTF-8 (JSON's `\\udc80` escapes decode to lone
surrogates, which the tokenizer, SQLite and `print` refuse) and bounds the nesting; the frame cap bounds every
length. `printable` is the one escape for environment text shown on a terminal (verdicts, CLI output, logs).
The text rules themselves live in `spade_jax.envs.text`.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

from spade_jax.envs.text import MAX_DEPTH, clean_value, printable, valid_text

__all__ = ["HEADER", "MAX_DEPTH", "ChannelError", "clean_value", "decode", "encode", "printable", "valid_text"]

HEADER = struct.Struct(">I")


class ChannelError(Exception):
    """The worker channel failed; `kind` is 'timeout', 'closed' or 'garbage'."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def encode(obj: Any) -> bytes:
    """One frame (header + compact JSON); raises ValueError/TypeError for non-JSON values."""
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> Any:
    """Parses one frame body; NaN/Infinity are rejected like any other non-JSON token."""

    def no_constants(name: str) -> Any:
        raise ValueError(f"non-JSON number {name}")

    return json.loads(body, parse_constant=no_constants)


def ready(fds: list[int], timeout: float, events: int = select.POLLIN) -> list[int]:
    """The fds of `fds` ready for `events` (or closed/failed) within `timeout` seconds. poll, not select: a host
    running hundreds of sandboxes holds fds past select's limit of 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, events)
    return [fd for fd, _ in poller.poll(max(0, int(timeout * 1000 + 0.999)))]


def write_frame(fd: int, data: bytes, deadline: float) -> None:
    """Writes `data` (an encoded frame) to a pipe without ever blocking past `deadline` (monotonic)."""
    view = memoryview(data)
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelError("timeout", "worker did not read its request in time")
            if not ready([fd], left, select.POLLOUT):
                continue
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError) as e:
                raise ChannelError("closed", f"worker channel closed ({e.strerror})") from None
    finally:
        try:
            os.set_blocking(fd, was_blocking)
        except OSError:
            pass


class FrameReader:
    """Reads frames from a pipe fd with a deadline per frame and a cap on the frame size. A byte on `wake_fd`
    (when given) ends a read at once as 'closed': how another thread stops a reader without closing its fd."""

    def __init__(self, fd: int, wake_fd: int | None = None):
        self.fd, self.wake_fd = fd, wake_fd
        self.buf = bytearray()

    def _fill(self, n: int, deadline: float) -> None:
        fds = [self.fd] if self.wake_fd is None else [self.fd, self.wake_fd]
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            got = ready(fds, left) if left > 0 else []
            if self.wake_fd in got:
                raise ChannelError("closed", "the channel was closed by the host")
            if not got:
                raise ChannelError("timeout", "worker did not answer in time")
            try:
                chunk = os.read(self.fd, max(65536, n - len(self.buf)))
            except OSError as e:
                raise ChannelError("closed", f"worker channel error ({e.strerror})") from None
            if not chunk:
                raise ChannelError("closed", "worker closed its channel")
            self.buf += chunk

    def read(self, deadline: float, limit: int) -> Any:
        """The next frame's JSON value; raises ChannelError (timeout/closed/garbage)."""
        self._fill(HEADER.size, deadline)
        (size,) = HEADER.unpack_from(self.buf)
        if size > limit:
            raise ChannelError("garbage", f"worker sent a {size}-byte frame (limit {limit})")
        self._fill(HEADER.size + size, deadline)
        body = bytes(self.buf[HEADER.size : HEADER.size + size])
        del self.buf[: HEADER.size + size]
        try:
            return decode(body)
        except (ValueError, RecursionError) as e:
            raise ChannelError("garbage", f"worker sent a malformed frame ({type(e).__name__})") from None
