"""The host side of one sandbox: a channel that carries the calls of several sessions at once.

Every request names its session (`sid`) and gets a request id (`rid`); the zygote inside (`worker.py`) answers
each in its own time, tagged with the `rid`, and one reader thread per sandbox hands each reply to the thread
waiting for it. So a session whose call hangs never delays another's: the zygote kills that episode alone at the
call's deadline. Writes are whole frames under a lock. A sandbox that stops answering altogether (the host-side
deadline, call timeout + grace, passes) or dies is killed, and every call waiting on it, of any session, comes
back `unavailable` (the host's failure, never an environment's); the kill is logged once with its reason. The grace is
longer on a sandbox that serves several sessions (`SHARED_GRACE_S` more): the zygote keeps each call's own
deadline, so the host's only catches a zygote that stopped answering, and on a loaded machine a slow answer must
not cost every session on the sandbox. Never raises: failures are `CallResult`s.

The sandbox's cgroup bound is the sum of its sessions' own bounds (`SandboxConfig.limits`): an episode holds no
memory outside its RLIMIT_AS and its tmpfs (sandbox/inside/guard.py), so a session's excess is its own `memory`
failure and the bound is not reached through sessions. Should it be anyway: with one session on it, going over it
during a call is that call's `memory` failure; with several, the kernel's kill (of whichever episode process it
picked, or of gVisor's whole sandbox) cannot be laid at one session's door: the sandbox is replaced and every
session on it gets `unavailable`, saying why.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

from spade_jax.sandbox import protocol
from spade_jax.sandbox.launchers import Launcher, start_worker
from spade_jax.sandbox.replies import CallResult, from_reply

log = logging.getLogger(__name__)

FOREVER_S = 3600.0  # the reader's wait per frame when no call is due (it is woken by kill())
SHARED_GRACE_S = 5.0  # more host-side grace (plus the call's timeout again) where several sessions share a sandbox


def host_grace_s(timeout: float, shared: bool) -> float:
    """How long past a call's own timeout the host waits for the zygote's answer before killing the sandbox."""
    return 1.0 + 0.25 * timeout + ((SHARED_GRACE_S + timeout) if shared else 0.0)


class _Waiter:
    """One call waiting for its reply (None: the channel closed first)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: Any = None


class SandboxWorker:
    """One running sandbox serving up to `sessions`-per-worker sessions; `sessions` is the pool's count of the
    sessions placed on it (kept under the pool's lock)."""

    def __init__(self, launcher: Launcher):
        self.proc, self.facts = start_worker(launcher)
        self.proc.own_channel()
        self.limit = launcher.config.max_return_bytes + 65536
        self.shared = launcher.sessions > 1  # may serve several sessions at once
        self.dead = ""  # why it can no longer serve
        self.sessions = 0
        self.retired = False  # taken out of the pool (counted once)
        self.draining = False  # takes no new session; replaced once its sessions are over
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # the waiters
        self._write_lock = threading.Lock()
        self._waiting: dict[int, _Waiter] = {}
        self._kill_lock = threading.Lock()
        self._ooms = self.proc.bound_events()[1]  # OOM kills in its cgroup already counted
        self._oom_why = ""  # set once such a kill hit several sessions: every call on it is then `crashed`
        self._reader = threading.Thread(target=self._read_replies, name="sandbox-replies", daemon=True)
        self._reader.start()

    def new_id(self) -> int:
        """A fresh session id on this sandbox."""
        return next(self._ids)

    def alive(self) -> bool:
        return not self.dead and self.proc.alive()

    def kill(self, why: str) -> None:
        """Kills the sandbox (every session on it), then closes its channel once no thread of ours uses it."""
        if not self.dead and why != "pool closed" and self.proc.popen.poll() is None:
            log.warning("sandbox worker killed (%d session(s) on it): %s", self.sessions, why)
        self.dead = self.dead or why
        with self._kill_lock:
            self.proc.kill()
            if threading.current_thread() is not self._reader:
                self._reader.join(10.0)
            with self._write_lock:  # a writer blocked on the pipe got EPIPE when the sandbox died
                self.proc.close_channel()

    # replies ---------------------------------------------------------------------------------------------
    def _read_replies(self) -> None:
        """Hands every reply to its waiter until the channel closes; then fails every waiter."""
        why = "it exited"
        try:
            while True:
                try:
                    frame = self.proc.reader.read(time.monotonic() + FOREVER_S, self.limit)
                except protocol.ChannelError as e:
                    if e.kind == "timeout":
                        continue
                    why = str(e)
                    break
                rid = frame.get("rid") if isinstance(frame, dict) else None
                with self._lock:
                    waiter = self._waiting.pop(rid, None) if isinstance(rid, int) else None
                if waiter is not None:
                    waiter.reply = frame.get("reply")
                    waiter.event.set()
        except (OSError, ValueError) as e:  # the fds went away under us
            why = f"channel error ({e})"
        self.dead = self.dead or f"sandbox died ({why})"
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for waiter in waiting:
            waiter.event.set()

    # requests --------------------------------------------------------------------------------------------
    def request(self, msg: dict, timeout: float, what: str) -> CallResult:
        """Sends one request and waits for its reply; the host-side deadline (timeout + grace) kills the sandbox
        if it is passed (only a zygote that stopped answering gets there: it keeps each call's deadline itself)."""
        if not self.alive():
            return CallResult.failure("unavailable", f"{what}: the worker is gone ({self.dead or 'it exited'})")
        rid = next(self._ids)
        try:
            data = protocol.encode({**msg, "rid": rid, "timeout": timeout})
        except (TypeError, ValueError) as e:
            return CallResult.failure("exception", f"{what}: arguments are not JSON-safe ({e})")
        deadline = time.monotonic() + timeout + host_grace_s(timeout, self.shared)
        bounds = self.proc.bound_events()
        waiter = _Waiter()
        with self._lock:
            self._waiting[rid] = waiter
        if self.dead:  # the reader ended before we were registered: nobody would wake us
            return self._forget(rid, self._died("the channel closed", bounds, what))
        try:
            with self._write_lock:
                protocol.write_frame(self.proc.stdin_fd, data, deadline)
        except protocol.ChannelError as e:
            if e.kind == "timeout":
                return self._forget(rid, self._hung(timeout, what))
            return self._forget(rid, self._died(str(e), bounds, what))
        except (OSError, ValueError) as e:  # the channel's fds went away under us (the sandbox was killed meanwhile)
            return self._forget(rid, self._died(f"worker channel error ({e})", bounds, what))
        if not waiter.event.wait(max(0.0, deadline - time.monotonic())):
            return self._forget(rid, self._hung(timeout, what))
        if waiter.reply is None:
            return self._died(self.dead or "the channel closed", bounds, what)
        method = str(msg.get("method") or msg.get("op"))
        return self._over_bounds(from_reply(waiter.reply, method), bounds, what)

    def _forget(self, rid: int, result: CallResult) -> CallResult:
        with self._lock:
            self._waiting.pop(rid, None)
        return result

    def _hung(self, timeout: float, what: str) -> CallResult:
        self.kill(f"{what} hung")
        why = f"{what}: the sandbox did not answer within {timeout:g} s and its grace (sandbox killed)"
        return CallResult.failure("unavailable", why)  # the zygote keeps each call's deadline: this is the host

    def _died(self, why: str, bounds: tuple[int, int, int], what: str) -> CallResult:
        time.sleep(0.05)  # let the stderr drain catch the runtime's last words
        tail = self.proc.stderr_tail().splitlines()[-1:]
        died = CallResult.failure("unavailable", f"{what}: sandbox died ({why}){': ' + tail[0] if tail else ''}")
        result = self._over_bounds(died, bounds, what)
        self.kill(f"{what}: {why}")
        return result

    def _over_bounds(self, result: CallResult, before: tuple[int, int, int], what: str) -> CallResult:
        """With this session alone on the sandbox: the environment's memory failure when the kernel killed a
        process of it for its total memory bound during the call (whatever the call returned), or the call crashed
        or hung while the bound refused memory; a crash or hang at the process bound says so. Refusals alone are
        not enough: reclaiming page cache at the bound counts as one. With several sessions on it, an OOM kill in
        it replaces the sandbox (`_shared_oom`), and refusals, which any of them may have caused, change nothing."""
        if self.proc.cgroup is None or result.error == "memory":
            return result
        now = self.proc.bound_events()
        shared = self._shared_oom(now[1])
        if shared is not None:
            return shared
        if self.sessions > 1:
            return result
        refused, killed, forks = (b - a for a, b in zip(before, now))
        failed = result.error in ("crashed", "timeout", "unavailable")
        limits = self.proc.cgroup.limits
        if killed or (refused and failed):
            bound = f"total memory bound ({limits.memory_mb} MB)"
            return CallResult.failure("memory", f"{what}: the sandbox went over its {bound}")
        if forks and failed:
            return CallResult.failure("crashed", f"{what}: the sandbox went over its process bound ({limits.pids})")
        return result

    def _shared_oom(self, ooms: int) -> CallResult | None:
        """`crashed` for this call (and every later one) once the kernel killed a process of the sandbox for its
        memory bound while several sessions were on it; the sandbox is killed. None otherwise."""
        with self._lock:
            if ooms > self._ooms and self.sessions > 1 and not self._oom_why:
                bound = self.proc.cgroup.limits.memory_mb
                self._oom_why = f"went over its total memory bound ({bound} MB) shared by {self.sessions} sessions"
            self._ooms = max(ooms, self._ooms)
            why = self._oom_why
        if not why:
            return None
        self.kill(why)
        return CallResult.failure("unavailable", f"the sandbox {why}; it was replaced")
