"""Escapes the /tmp cap with a filesystem of its own: step() makes a new user and mount namespace (unshare,
through ctypes imported at run time), which gives it every capability there, mounts a tmpfs with no size of
note and writes `mb` MB into it. Reports what each step returned."""

U = "_"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class UsernsTmpfs:
    def __init__(self, max_turns=25, mb=200, **kw):
        self.max_turns, self.mb = max_turns, mb

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes, os = _import("ctypes"), _import("os")
        libc = ctypes.CDLL(None, use_errno=True)
        out = {"unshare": libc.unshare(0x10000000 | 0x00020000), "unshare_errno": ctypes.get_errno()}  # USER|NS
        where = os.path.join(os.environ.get("TMPDIR", "/tmp"), "mnt")
        os.makedirs(where, exist_ok=True)
        out["mount"] = libc.mount(b"none", where.encode(), b"tmpfs", 0, b"size=4g")
        out["mount_errno"] = ctypes.get_errno()
        written = 0
        if out["mount"] == 0:
            try:
                fd = os.open(os.path.join(where, "fill"), os.O_WRONLY | os.O_CREAT, 0o600)
                for _ in range(self.mb):
                    os.write(fd, b"\1" * (1 << 20))
                    written += 1
                os.close(fd)
            except OSError as e:
                out["write_error"] = e.strerror
        out["written_mb"] = written
        return str(out), 0.0, True, False, out
