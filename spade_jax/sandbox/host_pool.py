"""A pool of long-lived sandboxed environment workers, and sessions that play one environment each.

`HostPool(num_workers, sandbox, sessions_per_worker=K)` runs up to `num_workers` sandboxes, each serving up to K
sessions at once: `capacity` = num_workers x K sessions in flight. `open(source)` places the session on the
least-loaded live worker with room (a worker not started yet counts as the least loaded: sessions spread over all
`num_workers` before any worker takes a second), loads the source there in a fresh episode process of its own and
returns an `EnvSession`; it blocks only while all `capacity` places are taken. `session.close()` frees the place.

Sessions on one worker are kept apart by the worker (`worker.py`): each episode process runs under a uid no other
live session on it has, and its calls are relayed independently, so a session that hangs, crashes, forks or
floods costs only itself (its own `timeout` / `crashed` / `memory` result). What they share is the sandbox: if it
dies (e.g. killed at its cgroup memory bound), every session on it gets `crashed`, and it is replaced. Where the
sandbox cannot give episodes uids of their own (bwrap or process level without root), sessions could not be told
apart: that level runs one session per worker, said once in the log.

Workers are reused across sessions (gVisor's start cost is paid rarely); one that crashed, hung or was killed is
replaced in the background. Every failure, including a dead sandbox, comes back as a `CallResult`, never an
exception; every reply crosses one door, `replies.from_reply`. Thread-safe: many sessions may run at once from
different threads (`HostPool.map` provides the threads), calls on one session from one thread at a time.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spade_jax.sandbox import protocol
from spade_jax.sandbox.launchers import Launcher, SandboxConfig, SandboxUnavailable, detect_level, remove_stale_dirs
from spade_jax.sandbox.pool_worker import SandboxWorker
from spade_jax.sandbox.replies import ERROR_KINDS, CallResult

__all__ = ["DEFAULT_SESSIONS_PER_WORKER", "ERROR_KINDS", "EXTRA_METHODS", "CallResult", "EnvSession", "HostPool"]

log = logging.getLogger(__name__)

EXTRA_METHODS = ("reference_action", "random_action", "metadata")
# 32 workers x 8 = 256 episodes in flight per host, what a continuously batched rollout keeps live; an episode
# process is a fork of the worker (a few MB of its own), so 8 of them cost far less than 8 sandboxes.
DEFAULT_SESSIONS_PER_WORKER = 8
_warned_levels: set[str] = set()


class EnvSession:
    """One environment loaded in one worker. Use from one thread at a time; close() frees its place."""

    def __init__(self, pool: HostPool, worker: SandboxWorker | None, sid: int, load_result: CallResult):
        self._pool, self._worker, self._sid, self.load_result = pool, worker, sid, load_result
        self.level = pool.level
        self._lock = threading.Lock()
        self._closed = False

    def _call(self, method: str, args: list, msg: dict | None = None) -> CallResult:
        with self._lock:
            if self._closed:
                return CallResult.failure("unavailable", f"{method}(): the session is closed")
            if not self.load_result.ok or self._worker is None:
                return self.load_result
            msg = {**(msg or {"op": "call", "method": method, "args": args}), "sid": self._sid}
            result = self._worker.request(msg, self._pool.sandbox.call_timeout_s, f"{method}()")
        self._pool._count(result)
        return result

    def reset(self, seed: int | None = None) -> CallResult:
        """Starts an episode; value is [observation, info]."""
        return self._call("reset", [seed])

    def step(self, action: str) -> CallResult:
        """Plays one action; value is [observation, reward, terminated, truncated, info]."""
        return self._call("step", [action])

    def hint(self) -> CallResult:
        """The environment's privileged hint; value None when it defines no hint()."""
        return self._call("hint", [])

    def leaks(self, hint: str) -> CallResult:
        """Whether `hint` gives away the answer of the current episode (call after reset), checked inside the
        sandbox: value {"leaked": bool, "by": "answer" | "state" | None}. Time-limited like every call; a
        failure is a CallResult (treat it as unknown)."""
        return self._call("leaks", [], {"op": "leaks", "hint": str(hint)})

    def call(self, method: str, *args: Any) -> CallResult:
        """One of the whitelisted extra methods: reference_action, random_action, metadata."""
        if method not in EXTRA_METHODS:
            return CallResult.failure("exception", f"method {method!r} is not callable (allowed: {EXTRA_METHODS})")
        return self._call(method, list(args))

    def close(self) -> None:
        """Ends the session (the worker cleans up after it before this returns) and frees its place; a worker
        that fails to end it is replaced, with every other session on it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            self._pool._release(worker, self._sid)

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class HostPool:
    """Up to `num_workers` long-lived sandboxed workers (started on demand), each serving up to
    `sessions_per_worker` sessions at once, reused across sessions, replaced when they die."""

    def __init__(
        self,
        num_workers: int = 4,
        sandbox: SandboxConfig | None = None,
        sessions_per_worker: int = DEFAULT_SESSIONS_PER_WORKER,
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if sessions_per_worker < 1:
            raise ValueError(f"sessions_per_worker must be >= 1, got {sessions_per_worker}")
        self.num_workers = num_workers
        self.sandbox = sandbox or SandboxConfig()
        remove_stale_dirs()  # temp dirs of runs that died without closing their pool
        self.level = detect_level(self.sandbox.level, self.sandbox)
        self._launcher = Launcher(self.sandbox, self.level, sessions_per_worker)
        self.sessions_per_worker = self._launcher.sessions
        if self.sessions_per_worker < sessions_per_worker and self.level not in _warned_levels:
            _warned_levels.add(self.level)
            log.warning("sandbox level %s here gives episodes no uid of their own: one session per worker "
                        "(sessions_per_worker=%d asked)", self.level, sessions_per_worker)  # fmt: skip
        self.capacity = num_workers * self.sessions_per_worker
        log.info("host pool: up to %d workers x %d sessions, sandbox level %s",
                 num_workers, self.sessions_per_worker, self.level)  # fmt: skip
        self._cv = threading.Condition()
        self._live: set[SandboxWorker] = set()
        self._starting = 0  # workers being started
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self.stats: Counter = Counter()
        self._replacing: set[threading.Thread] = set()  # replacement workers starting in the background

    # workers ---------------------------------------------------------------------------------------------
    def _place(self) -> SandboxWorker | CallResult:
        """A worker with room for one more session (its count taken), starting one when that is the least loaded
        choice; waits while every place is taken. Dead workers found on the way are taken out."""
        while True:
            with self._cv:
                while True:
                    if self._closed:
                        return CallResult.failure("unavailable", "the host pool is closed")
                    dead = [w for w in self._live if not w.alive()]
                    if dead:
                        break
                    room = [w for w in self._live if w.sessions < self.sessions_per_worker and not w.draining]
                    best = min(room, key=lambda w: w.sessions, default=None)
                    can_start = len(self._live) + self._starting < self.num_workers
                    if best is not None and (best.sessions == 0 or not can_start):
                        best.sessions += 1
                        return best
                    if can_start:
                        self._starting += 1
                        break
                    self._cv.wait()
            if not dead:
                return self._start_reserved(sessions=1)
            for w in dead:  # outside the lock: killing takes time
                self._retire(w, "it died", replace=False)

    def _start_reserved(self, sessions: int) -> SandboxWorker | CallResult:
        """Starts a worker for a slot already counted in `_starting` (call without the lock); the new worker
        holds `sessions` places. A start that fails is a `crashed` result."""
        try:
            worker = SandboxWorker(self._launcher)
        except (SandboxUnavailable, OSError, ValueError) as e:  # never out of the pool: a failed start is a result
            with self._cv:
                self._starting -= 1
                self._cv.notify_all()
            return CallResult.failure("unavailable", f"could not start a sandbox: {e}")
        with self._cv:
            self._starting -= 1
            self.stats["workers_started"] += 1
            if not self._closed:
                worker.sessions = sessions
                self._live.add(worker)
                self._cv.notify_all()
                return worker
        worker.kill("pool closed")
        return CallResult.failure("unavailable", "the host pool is closed")

    def _retire(self, worker: SandboxWorker, why: str, replace: bool = True) -> None:
        """Kills a failed worker and takes it out of the pool (counted once); `replace` starts another in the
        background so the next open() does not pay the start."""
        worker.kill(why)
        with self._cv:
            if worker.retired:
                return
            worker.retired = True
            self._live.discard(worker)
            self.stats["workers_replaced"] += 1
            self._cv.notify_all()
            if self._closed or not replace:
                return
            self._starting += 1
            t = threading.Thread(target=self._replace, name="sandbox-replace", daemon=True)
            self._replacing.add(t)
        t.start()

    def _replace(self) -> None:
        got = self._start_reserved(sessions=0)
        if isinstance(got, CallResult) and not self._closed:
            log.warning("could not replace a sandbox worker: %s", got.message)
        with self._cv:
            self._replacing.discard(threading.current_thread())

    def _release(self, worker: SandboxWorker, sid: int) -> None:
        """Ends one session on `worker` (it cleans up before it answers) and frees its place; a worker that
        fails to end it is replaced. Never raises, so no place is ever lost to the pool (a lost one would
        deadlock open())."""
        try:
            ended = worker.alive() and worker.request({"op": "end", "sid": sid}, self.sandbox.call_timeout_s,
                                                      "close()").ok  # fmt: skip
        except Exception as e:  # a last line of defence: request() reports failures as results
            log.warning("closing a session failed: %s", protocol.printable(e))
            ended = False
        with self._cv:
            worker.sessions -= 1
            drained = worker.draining and worker.sessions == 0
            self._cv.notify_all()
        if not ended:
            self._retire(worker, "it failed")
        elif drained:
            self._retire(worker, "it could not start more episodes (drained)")

    def _count(self, result: CallResult) -> None:
        with self._cv:
            self.stats["calls"] += 1
            if not result.ok:
                self.stats[f"error_{result.error}"] += 1

    # public API ---------------------------------------------------------------------------------------------
    def warm_up(self, n: int | None = None) -> None:
        """Starts up to `n` (default all) workers now, in parallel, instead of on first use."""
        with self._cv:
            n = max(0, min(n or self.num_workers, self.num_workers - len(self._live) - self._starting))
            self._starting += n
        self.map(lambda _: self._start_reserved(sessions=0), range(n))

    def open(self, source: str, *, env_kwargs: dict | None = None, allow_exec: bool = False) -> EnvSession:
        """Loads `source` in a place of its own on a worker (blocks while every place is taken); load failures
        are in `load_result`. `allow_exec`: the source is a trusted runner that compiles and runs code given to
        it (the code evaluations' candidate programs): its own compile/exec calls pass the episode's guard; every
        other rule holds for the code it runs. Never for an environment."""
        if not isinstance(source, str):
            return EnvSession(self, None, 0, CallResult.failure("load_error", "source must be a str"))
        size = len(source.encode("utf-8", "surrogatepass"))
        if size > self.sandbox.max_source_bytes:
            msg = f"source is {size} bytes (limit {self.sandbox.max_source_bytes})"
            return EnvSession(self, None, 0, CallResult.failure("load_error", msg))
        kwargs = dict(env_kwargs or {})
        try:
            protocol.encode(kwargs)
        except (TypeError, ValueError) as e:
            return EnvSession(self, None, 0, CallResult.failure("load_error", f"env_kwargs are not JSON-safe: {e}"))
        worker = self._place()
        if isinstance(worker, CallResult):
            return EnvSession(self, None, 0, worker)
        sid = worker.new_id()
        msg = {"op": "load", "sid": sid, "source": source, "kwargs": kwargs, "allow_exec": bool(allow_exec)}
        result = worker.request(msg, self.sandbox.load_timeout_s, "load()")
        with self._cv:
            self.stats["sessions"] += 1
            if result.error == "unavailable" and worker.alive():  # e.g. no clean uid left: no new sessions on it;
                worker.draining = True  # the ones running finish, then it is replaced (`_release`)
        self._count(result)
        return EnvSession(self, worker, sid, result)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list:
        """fn(item) for every item on a thread pool sized to the pool's capacity (sessions run concurrently)."""
        with self._cv:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.capacity, thread_name_prefix="host-pool")
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        """Kills every worker and removes the pool's temporary files."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            workers = list(self._live)
            self._live.clear()
            self._cv.notify_all()
            replacing = list(self._replacing)
        for w in workers:
            w.kill("pool closed")
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        for t in replacing:  # a sandbox still starting writes into the launcher's dir: it is killed at its end
            t.join(self._launcher.config.start_timeout_s)
        self._launcher.close()

    def __enter__(self) -> HostPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
