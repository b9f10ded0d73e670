"""The processes the zygote (`worker.py`) makes inside the sandbox, and what it checks about them.

STANDARD LIBRARY ONLY: imported by the worker inside the sandbox (like `episode.py` and `cleanup.py`).

  * `fork_episode`: one episode process per session, under a uid of its own (one of the worker's uid set; no two
    live sessions share one), in a session of its own (its own scheduler autogroup), with every fd but its two
    pipes closed, rlimits set, a umask of 077, and where the sandbox allows (gVisor, bwrap) mount and IPC
    namespaces of its own with a private tmpfs /tmp (`guard.isolate`); then the episode-level seccomp filter
    (`guard.install_seccomp`: one process, no exec, sockets or IPC), before any environment code.
  * `fork_reaper`: after a session, a process that becomes its uid, SIGKILLs every process of that uid (kill(-1)
    spares only the caller) and deletes the files that uid owns directly in the scratch dirs (`remove_owned`) and
    its SysV objects. It touches nothing of another uid: other live sessions on the worker are not disturbed.
  * `uid_processes` / `owned_entries`: what the zygote checks before it calls a uid clean.
  * `Inbox`: one episode's reply bytes, read without blocking, so one slow or hostile episode never stalls the
    zygote's relay for the others; `Slot`, `Call`, `Cleaning`: what the zygote keeps per session, per open call
    and per uid being cleaned.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time

from spade_jax.sandbox.inside import guard
from spade_jax.sandbox.inside.cleanup import remove_ipc, remove_owned, remove_tree
from spade_jax.sandbox.inside.episode import HEADER, EpisodeProcess

NO_UID = object()  # a session whose episode process never started holds no uid


class EpisodeProc:
    """The zygote's handle on one episode process: pid, its two pipe ends (non-blocking) and its uid."""

    def __init__(self, pid: int, to_fd: int, from_fd: int, uid: int | None):
        self.pid, self.to_fd, self.from_fd, self.uid = pid, to_fd, from_fd, uid

    def close_fds(self) -> None:
        for fd in (self.to_fd, self.from_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def fork_episode(cfg: dict, uid: int | None) -> EpisodeProc:
    """Forks an episode process that will run as `uid` and serve requests on its pipes; OSError when the fork
    fails (the sandbox's process bound)."""
    gc.freeze()  # keep the collector off the zygote's objects: fewer copy-on-write page faults
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)
        raise
    if pid == 0:  # episode process
        try:
            become_episode(cfg, to_r, from_w, uid)
        finally:
            os._exit(70)
    os.close(to_r)
    os.close(from_w)
    os.set_blocking(to_w, False)
    os.set_blocking(from_r, False)
    return EpisodeProc(pid, to_w, from_r, uid)


def become_episode(cfg: dict, rfd: int, wfd: int, uid: int | None) -> None:
    """In the forked child: drops everything of the zygote, then serves as an `EpisodeProcess` until EOF."""
    import resource

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    os.setsid()
    keep = sorted({0, 1, 2, rfd, wfd})
    for lo, hi in zip(keep, keep[1:] + [65536]):  # the host channel, other sessions' pipes: everything else goes
        os.closerange(lo + 1, hi)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    mb = 1 << 20
    limits = [
        (resource.RLIMIT_AS, cfg["memory_mb"] * mb),
        (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
        (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
        (resource.RLIMIT_FSIZE, cfg["max_file_mb"] * mb),
        (resource.RLIMIT_CORE, 0),
    ]
    if uid is not None:  # RLIMIT_NPROC counts per uid: only meaningful for a uid of our own
        limits.append((resource.RLIMIT_NPROC, cfg["max_processes"]))
    for which, value in limits:
        resource.setrlimit(which, (value, value + 2 if which == resource.RLIMIT_CPU else value))
    # its own mount and IPC namespaces, /tmp and /dev/shm (private tmpfs), /proc (hidepid): needs the zygote's
    # privileges, so before the uid switch; what it writes goes with its namespaces when it dies
    isolated = bool(cfg.get("isolate")) and guard.isolate(cfg["tmp"], uid, cfg["tmp_mb"], mounts=cfg["mounts"])
    home = guard.home_of(cfg["tmp"], uid) if cfg.get("homes") and uid is not None else cfg["tmp"]
    try:  # at the sandbox's memory bound the kernel kills episode processes first, never the zygote
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.umask(0o077)  # what it writes is its own: another session's uid cannot read it
    os.chdir(home)
    os.environ.update(TMPDIR=home, HOME=home)
    filtered = guard.install_seccomp(bytes.fromhex(cfg.get("episode_seccomp") or ""))
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]  # raw memory stays out of reach: importing it again is refused (guard's hook)
    facts = {"isolated": isolated, "own_tmpfs": isolated or home != cfg["tmp"], "filtered": filtered}
    EpisodeProcess({**cfg, "home": home}, facts).serve(rfd, wfd)


def fork_reaper(cfg: dict, uid: int | None, scratch: list[str], deadline: float, skip: tuple[str, ...] = ()) -> int:
    """Forks a process that ends what `uid` left: its processes (SIGKILL, a few passes: zombies keep answering),
    the entries it owns in `scratch` and its SysV objects; it exits 0 when all of its files went. With no uid of
    its own (uid None: one session per worker) it empties `scratch` whole instead. OSError when it cannot fork."""
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.closerange(3, 65536)  # before it becomes the uid: what it kills must not reach the channels through it
        if uid is None:
            status = 0 if all([remove_tree(d, deadline, keep_root=True) for d in scratch]) else 1
        else:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(3):
                try:
                    os.kill(-1, signal.SIGKILL)  # every process of this uid except ourselves
                except ProcessLookupError:
                    break
                time.sleep(0.001)
            status = 0 if remove_owned(scratch, uid, deadline, skip) else 1
        if cfg.get("isolate") and uid is not None:
            remove_ipc(uid)  # an episode that could not be isolated may have left SysV objects here
    finally:
        os._exit(status)


def uid_processes(uid: int) -> list[int]:
    """Pids of the processes of `uid` in this PID namespace, zombies included (read from /proc/<pid>/status,
    which only root may read for processes that changed uid; the zygote is root)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f):
                    found.append(int(name))
        except (OSError, ValueError):
            pass
    return found


def owned_entries(scratch: list[str], uid: int, skip: tuple[str, ...] = ()) -> list[str]:
    """Paths directly in the `scratch` dirs that `uid` owns (not followed through symlinks), but `skip`."""
    out = []
    for d in scratch:
        try:
            with os.scandir(d) as it:
                for entry in it:
                    try:
                        if entry.stat(follow_symlinks=False).st_uid == uid and entry.path not in skip:
                            out.append(entry.path)
                    except OSError:
                        pass
        except OSError:
            pass
    return out


def describe(status: int | None) -> str:
    """How a process ended, from its wait status ('' when unknown)."""
    if status is None:
        return ""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = {signal.SIGXCPU: "CPU-time limit", signal.SIGSEGV: "segmentation fault"}.get(sig, "")
        try:
            sname = signal.Signals(sig).name
        except ValueError:
            sname = f"signal {sig}"
        return f"killed by {sname}" + (f", {name}" if name else "")
    return f"exited with status {os.WEXITSTATUS(status)}"


class Inbox:
    """Bytes an episode process wrote, gathered without blocking until they make one frame."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def fill(self, fd: int) -> bool:
        """Reads what is there; False on EOF (the episode closed its end or died)."""
        try:
            data = os.read(fd, 1 << 20)
        except BlockingIOError:
            return True
        except OSError:
            return False
        self.buf += data
        return bool(data)

    def frame(self, limit: int) -> bytes | None:
        """The first complete frame's body, removed from the buffer; None while incomplete. ValueError when its
        header announces more than `limit` bytes (nothing more is read of it)."""
        if len(self.buf) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self.buf)
        if size > limit:
            raise ValueError(f"reply of {size} bytes exceeds the {limit}-byte limit")
        if len(self.buf) < HEADER.size + size:
            return None
        body = bytes(self.buf[HEADER.size : HEADER.size + size])
        del self.buf[: HEADER.size + size]
        return body


# ------------------------------------------------------------------------------------- the zygote's records


class Call:
    """A request relayed to an episode process and not answered yet (`cpu0`: its CPU seconds when sent)."""

    def __init__(self, rid: int, nonce: bytes, limit: float, what: str):
        self.rid, self.nonce, self.limit, self.what = rid, nonce, limit, what
        self.deadline = time.monotonic() + limit
        self.cpu0 = -1.0
        self.others0: dict[int, float] = {}  # the other live sessions' CPU seconds when it was sent


class Slot:
    """One session as the zygote sees it: its episode process (None once gone), uid, buffers and open call."""

    def __init__(self, sid: object):
        self.sid = sid
        self.proc: EpisodeProc | None = None
        self.uid: object = NO_UID
        self.dead = "no environment is loaded"  # why it cannot answer
        self.inbox = Inbox()
        self.outbox = memoryview(b"")
        self.call: Call | None = None


class Cleaning:
    """A finished session's uid being cleaned; `rid`: the `end` request to answer when done (None: nobody);
    `quarantined`: its first budget ran out, the uid is kept out of use while this goes on."""

    def __init__(self, uid: object, budget: float, rid: int | None, *, quarantined: bool = False):
        self.uid, self.budget, self.rid, self.quarantined = uid, budget, rid, quarantined
        self.deadline = time.monotonic() + budget
        self.reaper: int | None = None  # pid of the reaper running now
        self.next_at = 0.0
        self.passes = 0
