"""Leaves a System V shared memory segment behind as a channel to the next environment: step() first looks for
the segment an earlier session left under a fixed key and counts every segment it can see, then creates that
key itself, writes a marker in it and leaves it (detached, never removed). Without removal at the session's end
the next session, under another uid, reads the marker. ctypes is imported at run time through the builtins a
function's globals lead to (computed dunder names)."""

import random

U = "_"
KEY = 0x5ADE


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class SysvShmLeave:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes = _import("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        buf = ctypes.create_string_buffer(1024)
        highest = libc.shmctl(0, 14, buf)  # SHM_INFO: the highest index in use
        visible = sum(libc.shmctl(i, 13, buf) >= 0 for i in range(max(highest, -1) + 1))  # SHM_STAT
        seen = ""
        old = libc.shmget(KEY, 0, 0)
        if old >= 0:
            addr = libc.shmat(old, None, 0o10000)  # SHM_RDONLY
            if addr not in (None, ctypes.c_void_p(-1).value):
                seen = ctypes.string_at(addr, 64).split(b"\0")[0].decode("latin-1")
        ident = libc.shmget(KEY, 1 << 20, 0o1000 | 0o666)
        addr = libc.shmat(ident, None, 0)
        marker = f"left by {random.random():.12f}".encode()
        ctypes.memmove(addr, marker, len(marker))
        libc.shmdt(ctypes.c_void_p(addr))
        info = {"seen": seen, "visible": int(visible), "left": marker.decode()}
        return f"seen {seen!r}, {visible} segments visible", 0.0, True, False, info
