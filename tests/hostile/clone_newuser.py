"""Makes a user namespace without unshare(): step() calls the raw clone system call with CLONE_NEWUSER (the
child exits at once), then clone3, whose flags a seccomp filter cannot read. Reports what each returned."""

U = "_"


def _reach(holder, name):
    # getattr on a parameter: the static gate can only judge getattr on a module's own name
    return getattr(holder, name)


def _import(name):
    builtins = _reach(_reach, U * 2 + "globals" + U * 2)[U * 2 + "builtins" + U * 2]
    imp = U * 2 + "import" + U * 2
    return (builtins[imp] if isinstance(builtins, dict) else _reach(builtins, imp))(name)


class CloneNewuser:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        ctypes, os = _import("ctypes"), _import("os")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        out = {}
        pid = libc.syscall(56, 0x10000000 | 17, None, None, None, None)  # clone(CLONE_NEWUSER | SIGCHLD)
        if pid == 0:
            os._exit(0)
        out["clone"], out["clone_errno"] = pid, ctypes.get_errno()
        if pid > 0:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        args = ctypes.create_string_buffer((0x10000000).to_bytes(8, "little") + bytes(80))  # flags = NEWUSER
        pid3 = libc.syscall(435, args, 88)  # clone3(args, size)
        if pid3 == 0:
            os._exit(0)
        out["clone3"], out["clone3_errno"] = pid3, ctypes.get_errno()
        if pid3 > 0:
            try:
                os.waitpid(pid3, 0)
            except ChildProcessError:
                pass
        return str(out), 0.0, True, False, out
