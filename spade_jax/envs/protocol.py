"""Host side of the worker channel: length-prefixed JSON frames over pipes, with deadlines and size caps.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON. The sandbox side
(`spade_jax.envs.episode`, stdlib only, which may import nothing of ours) carries its own copy of the few
framing lines; `tests/test_pool_protocol.py` checks that both sides agree. Every read has a deadline and a
byte cap so a hung or hostile worker can only cost the host one call's timeout.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

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
            if not select.select([], [fd], [], left)[1]:
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
    """Reads frames from a pipe fd with a deadline per frame and a cap on the frame size."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = bytearray()

    def _fill(self, n: int, deadline: float) -> None:
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], max(left, 0))[0]:
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
