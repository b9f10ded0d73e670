"""A well-behaved episode that keeps a secret the way ordinary environment code does: in memory, in a file in its
working directory, in a file it writes by absolute path (default mode) in its TMPDIR (all it may write in the
sandbox: sandbox/inside/guard.py), and where the sandbox still allows one (it does not: ctypes and SysV are
refused) in a SysV shared-memory segment (mode 0600). Each step checks that its files still hold the secret and
that it was never stopped."""

import os


class NeighbourVictim:
    def __init__(self, secret="", max_turns=6, **kw):
        self.secret, self.max_turns = secret, max_turns

    def reset(self, seed=None):
        self.t = 0
        self.tmp_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"victim-{os.getpid()}.txt")
        for path in ("state.txt", self.tmp_file):
            with open(path, "w") as f:
                f.write(self.secret)
        try:
            import ctypes
        except PermissionError:
            ctypes = None
        libc = ctypes.CDLL(None, use_errno=True) if ctypes else None
        shmid = libc.shmget(0, 4096, 0o1000 | 0o600) if libc else -1  # IPC_PRIVATE, IPC_CREAT, owner only
        if shmid >= 0:
            libc.shmat.restype = ctypes.c_void_p
            addr = libc.shmat(shmid, None, 0)
            if addr not in (None, ctypes.c_void_p(-1).value):
                ctypes.memmove(addr, self.secret.encode(), len(self.secret))
        info = {"pid": os.getpid(), "cwd": os.getcwd(), "tmp_file": self.tmp_file, "uid": os.getuid(), "shmid": shmid}
        return "ready", info

    def step(self, action):
        self.t += 1
        intact = []
        for path in ("state.txt", self.tmp_file):
            with open(path) as f:
                intact.append(f.read() == self.secret)
        info = {"intact": all(intact), "pid": os.getpid(), "cwd": os.getcwd()}
        return f"{action}:{self.t}", float(self.t), self.t >= self.max_turns, False, info
