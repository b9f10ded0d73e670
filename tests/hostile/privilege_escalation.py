"""Try to become root again, mount, chroot and ptrace the zygote."""

import ctypes
import os


class PrivilegeEscalation:
    def __init__(self, **kw):
        pass

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        out = {"uid": os.getuid(), "euid": os.geteuid()}
        for name, fn in [
            ("setuid0", lambda: os.setuid(0)),
            ("setgid0", lambda: os.setgid(0)),
            ("chroot", lambda: os.chroot("/tmp")),
        ]:
            try:
                fn()
                out[name] = "ok"
            except OSError as e:
                out[name] = e.strerror
        libc = ctypes.CDLL(None, use_errno=True)
        out["mount"] = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
        out["ptrace_parent"] = libc.ptrace(16, os.getppid(), None, None)  # PTRACE_ATTACH
        out["euid_after"] = os.geteuid()
        return repr(out), 0.0, True, False, out
