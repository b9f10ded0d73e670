"""Reaches for kernel interfaces no game needs and kernel exploits start from: bpf(), io_uring_setup(),
userfaultfd(), perf_event_open(), keyctl(), ptrace(PTRACE_TRACEME) and setns(), through the raw system call.
Reports which ones the kernel let through (a non-negative result)."""

U = "_"
CALLS = {"bpf": (321, 0, 0, 0), "io_uring_setup": (425, 8, 0, 0), "userfaultfd": (323, 0, 0, 0),
         "perf_event_open": (298, 0, 0, -1), "keyctl": (250, 0, 0, 0), "ptrace": (101, 0, 0, 0),
         "setns": (308, 0, 0, 0)}  # fmt: skip


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class KernelSurface:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes = _import("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        buf = ctypes.create_string_buffer(256)
        out = {}
        for name, (nr, a, b, c) in CALLS.items():
            ctypes.set_errno(0)
            r = libc.syscall(nr, ctypes.c_long(a), buf if name in ("io_uring_setup", "perf_event_open") else None,
                             ctypes.c_long(b), ctypes.c_long(c))  # fmt: skip
            out[name] = (int(r), ctypes.get_errno())
        allowed = sorted(k for k, (r, _) in out.items() if r >= 0)
        return f"allowed: {allowed}", 0.0, True, False, {"calls": out, "allowed": allowed}
