"""Takes host memory as System V shared memory: step() creates segments of 64 MB (ctypes, imported at run
time through the builtins a function's globals lead to, with computed dunder names) and touches every page,
until `mb` MB are held, detaching each (so RLIMIT_AS never binds). Segments belong to the IPC namespace, not to
the episode: no rlimit of the episode process counts them, and they outlive it."""

U = "_"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class SysvShmFill:
    def __init__(self, max_turns=25, mb=900, **kw):
        self.max_turns, self.mb = max_turns, mb

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes = _import("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        libc.shmdt.argtypes = [ctypes.c_void_p]
        held = 0
        while held < self.mb:
            ident = libc.shmget(0, 64 << 20, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
            if ident < 0:
                return f"shmget failed at {held} MB", 0.0, True, False, {"mb": held}
            addr = libc.shmat(ident, None, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return f"shmat failed at {held} MB", 0.0, True, False, {"mb": held}
            ctypes.memset(addr, 1, 64 << 20)
            libc.shmdt(ctypes.c_void_p(addr))  # detached, the segment still holds its pages: no address space
            held += 64
        return f"holding {held} MB of SysV shared memory", 0.0, True, False, {"mb": held}
