"""Escape through an abstract-namespace unix socket (no file needed) the host is listening on."""

import socket


class NetAbstractUnix:
    def __init__(self, ctx=None, **kw):
        self.ctx = ctx or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect("\0" + self.ctx["abstract_name"])
            s.sendall(b"ESCAPED")
            return "connected", 0.0, True, False, {}
        except OSError as e:
            return f"failed: {e}", 0.0, True, False, {}
