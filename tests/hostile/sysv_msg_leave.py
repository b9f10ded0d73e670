"""Leaves a System V message queue behind as a channel to the next environment: step() first reads any message
waiting in the queue under a fixed key (left by an earlier session), then creates the queue itself and sends a
marker into it, never removing it. Without removal at the session's end the next session, under another uid,
receives the marker. ctypes is imported at run time through the builtins a function's globals lead to."""

import random

U = "_"
KEY = 0x5ADF


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class SysvMsgLeave:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes = _import("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(8 + 128)
        seen = ""
        old = libc.msgget(KEY, 0)
        if old >= 0 and libc.msgrcv(old, buf, 128, 0, 0o4000) > 0:  # IPC_NOWAIT
            seen = buf.raw[8:].split(b"\0")[0].decode("latin-1")
        ident = libc.msgget(KEY, 0o1000 | 0o666)
        marker = f"left by {random.random():.12f}".encode()
        msg = ctypes.create_string_buffer(8 + len(marker) + 1)
        ctypes.memmove(msg, (1).to_bytes(8, "little") + marker, 8 + len(marker))
        sent = libc.msgsnd(ident, msg, len(marker) + 1, 0o4000) == 0
        return f"seen {seen!r}", 0.0, True, False, {"seen": seen, "sent": sent, "left": marker.decode()}
