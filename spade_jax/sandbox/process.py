"""One running sandbox as the host sees it (`SandboxProcess`): its channel fds, a tail of its stderr, the bound
events of its cgroup, and kill(), which takes down the runtime and every process inside it. Nothing here raises
on a process that is already gone.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path

from spade_jax.sandbox import cgroups, protocol

log = logging.getLogger("spade_jax.sandbox.launchers")  # one logger for the sandbox layer (tests listen on it)


class SandboxProcess:
    """One running sandbox with its worker: the channel fds, a stderr tail, and kill().

    The channel (stdin, stdout) is closed by kill(), unless an owner took it (`own_channel`): then kill() only
    wakes the owner's reader (`reader` reads 'closed') and the owner closes it (`close_channel`) once no thread of
    its own uses the fds, so no thread ever reads or writes an fd number that was closed and handed out again."""

    def __init__(self, popen: subprocess.Popen, level: str, on_kill=None, cgroup: cgroups.Cgroup | None = None):
        self.popen, self.level, self._on_kill, self.cgroup = popen, level, on_kill, cgroup
        self.peak_mb = 0.0  # the most memory the whole sandbox used at once, read from its cgroup when killed
        self.stdin_fd = popen.stdin.fileno()
        self._wake_r, self._wake_w = os.pipe()
        self.reader = protocol.FrameReader(popen.stdout.fileno(), wake_fd=self._wake_r)
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._killed = False
        self._owned = False
        self._channel_closed = False
        threading.Thread(target=self._drain, name="sandbox-stderr", daemon=True).start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self.popen.stderr.fileno(), 65536):
                self._tail = (self._tail + chunk)[-4096:]
        except (OSError, ValueError):
            pass

    def stderr_tail(self) -> str:
        """Last lines the sandbox runtime or the worker wrote to stderr (diagnostics)."""
        return bytes(self._tail).decode("utf-8", "replace").strip()

    def alive(self) -> bool:
        return not self._killed and self.popen.poll() is None

    def own_channel(self) -> None:
        """From now on the caller closes the channel (`close_channel`), after kill()."""
        self._owned = True

    def close_channel(self) -> None:
        """Closes stdin, stdout and the wake pipe (idempotent)."""
        with self._lock:
            if self._channel_closed:
                return
            self._channel_closed = True
        for f in (self.popen.stdin, self.popen.stdout):
            try:
                f.close()
            except OSError:
                pass
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def kill(self) -> None:
        """Kills the whole sandbox (runtime, worker, every process inside). Idempotent."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
        pid = self.popen.pid
        for child in _children_of(pid):  # runsc's sandbox/gofer run in sessions of their own
            _signal(child, signal.SIGKILL)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("sandbox process %d did not exit after SIGKILL", pid)
        if self._owned:
            with self._lock:
                if not self._channel_closed:
                    os.write(self._wake_w, b"x")  # the owner's reader stops; the owner closes the channel
        else:
            self.close_channel()
        try:
            self.popen.stderr.close()
        except OSError:
            pass
        if self.cgroup is not None:  # kills what is left in it (a runtime helper in a session of its own)
            self.peak_mb = self.cgroup.peak_mb()
            self.cgroup.remove()
        if self._on_kill:
            self._on_kill()

    def bound_events(self) -> tuple[int, int, int]:
        """How often this sandbox ran into its bounds so far: (memory refusals, OOM kills, process refusals);
        zeros without a cgroup (see `cgroups.Cgroup`)."""
        if self.cgroup is None:
            return 0, 0, 0
        return (*self.cgroup.memory_events(), self.cgroup.pids_events())


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(name))
    return out


def kill_uid(uid: int, python: str) -> None:
    """Kills every host process of `uid` (the process level has no PID namespace to do it for us)."""
    code = (
        "import os, time\nfor _ in range(3):\n try: os.kill(-1, 9)\n"
        " except ProcessLookupError: break\n time.sleep(0.001)\n"
    )
    try:
        subprocess.run([python, "-S", "-c", code], user=uid, group=uid, extra_groups=[], timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("could not clean up processes of uid %d: %s", uid, e)
