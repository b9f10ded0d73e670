"""A POSIX message queue survives its session at the bubblewrap level: step() first reads whatever message waits
in the queue "/spade-left" (left by an earlier session, under another uid), then opens it itself world-readable
(umask 0) and leaves a marker in it. The cleanup removes processes, files and SysV objects of the uid, not POSIX
queues; at the bwrap level every session of a sandbox shares its IPC namespace, so the queue (and its memory)
outlives the session and carries data to the next one. ctypes comes through the builtins a function's globals
lead to (computed dunder names)."""

import random

U = "_"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _os():
    # random's module globals, through a method of one of its classes and a name built at run time: the static gate
    # cannot read that (it says so: gates/static.py); what `os` may then do is the sandbox's guard's business
    fn = _reach(random.Random, "seed")
    return _reach(fn, "".join(("_", "_glo", "bals", "_", "_")))["_os"]


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class MqueueEnv:
    def __init__(self, max_turns=25, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes, os = _import("ctypes"), _os()
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            mq_open = libc.mq_open
        except AttributeError:
            mq_open = ctypes.CDLL("librt.so.1", use_errno=True).mq_open
            libc = mq_open and ctypes.CDLL("librt.so.1", use_errno=True)
        mq_open.restype = ctypes.c_int
        mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
        buf = ctypes.create_string_buffer(8192)
        seen = ""
        old = mq_open(b"/spade-left", os.O_RDONLY | os.O_NONBLOCK, 0, None)
        if old >= 0:
            n = libc.mq_receive(old, buf, 8192, None)
            seen = buf.raw[: max(n, 0)].decode("latin-1")
        os.umask(0)
        q = mq_open(b"/spade-left", os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o666, None)
        err = ctypes.get_errno() if q < 0 else 0
        marker = f"uid {os.getuid()} was here {random.random():.9f}".encode()
        sent = q >= 0 and libc.mq_send(q, marker, len(marker), 0) == 0
        info = {"seen": seen, "sent": bool(sent), "left": marker.decode(), "errno": err}
        return f"seen {seen!r}", 0.0, True, False, info
