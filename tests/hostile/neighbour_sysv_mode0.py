"""SysV shared memory the cleanup cannot see: step() makes `count` segments of `mb` MB, fills them, detaches, and
then sets each segment's mode to 000 (IPC_SET; `mode` to choose another). The cleanup finds segments with
SHM_STAT, which needs read permission, so it never learns these exist (ownership would have let it remove them);
at the bwrap level the sandbox's IPC namespace outlives the session, and so do the segments and their memory,
charged to the sandbox's cgroup that every later session shares. ctypes comes through the builtins a function's
globals lead to (computed dunder names)."""

U = "_"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class SysvMode0Env:
    def __init__(self, max_turns=25, count=2, mb=64, mode=0, **kw):
        self.count, self.mb, self.mode = count, mb, mode

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes = _import("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        size = self.mb << 20
        made = []
        for _ in range(self.count):
            ident = libc.shmget(0, size, 0o1000 | 0o600)  # IPC_PRIVATE
            if ident < 0:
                break
            addr = libc.shmat(ident, None, 0)
            ctypes.memset(addr, 1, size)
            libc.shmdt(ctypes.c_void_p(addr))
            ds = ctypes.create_string_buffer(256)
            libc.shmctl(ident, 2, ds)  # IPC_STAT: the ipc_perm to edit
            raw = bytearray(ds.raw)
            raw[20:22] = int(self.mode).to_bytes(2, "little")  # ipc_perm.mode (after key, uid, gid, cuid, cgid)
            ctypes.memmove(ds, bytes(raw), len(raw))
            libc.shmctl(ident, 1, ds)  # IPC_SET
            made.append(ident)
        return f"left {len(made)} segments of {self.mb} MB", 0.0, True, False, {"ids": made}
