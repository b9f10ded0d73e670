"""A pool of long-lived sandboxed environment workers, and sessions that play one environment each.

`HostPool.open(source)` takes a free worker (blocking until one is), loads the source there in a fresh
episode process and returns an `EnvSession`; `session.close()` hands the worker back. Workers are reused
across sessions (gVisor's start cost is paid rarely); one that crashed, hung or was killed is replaced in
the background. Every failure, including a dead sandbox, comes back as a `CallResult`, never an exception.
Thread-safe: many sessions may run at once from different threads (`HostPool.map` provides the threads).

Every reply crosses one door, `_from_reply`: what the episode sent (or forged) becomes plain data (strings valid
UTF-8, nesting bounded, see `protocol.clean_value`) of the shape its method promises (reset: [str, dict];
step: [str, finite float, bool, bool, dict]; hint: str or None; load: the env's description), and the
messages of failures are one printable line. Anything else is that environment's `bad_return`, so no host code
downstream (tokenizer, memory, gates, CLI) ever sees a value that can make it raise.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from spade_jax.envs import protocol
from spade_jax.envs.sandbox import (
    Launcher,
    SandboxConfig,
    SandboxUnavailable,
    detect_level,
    remove_stale_dirs,
    start_worker,
)

log = logging.getLogger(__name__)

EXTRA_METHODS = ("reference_action", "random_action", "metadata")
ERROR_KINDS = ("timeout", "crashed", "memory", "bad_return", "exception", "load_error")


@dataclass
class CallResult:
    """Outcome of one call into a sandboxed environment; `ok` False carries a structured `error`."""

    ok: bool
    value: Any = None  # reset -> [obs, info]; step -> [obs, reward, terminated, truncated, info]; hint -> str|None
    error: str | None = None  # None | timeout | crashed | memory | bad_return | exception | load_error
    message: str = ""  # one line naming the problem
    traceback: str = ""  # text from inside the sandbox for exception / load_error

    @classmethod
    def failure(cls, error: str, message: str, traceback: str = "") -> CallResult:
        """A failed call; message and traceback (sandbox text) are made printable: one line, controls escaped."""
        line = protocol.printable(" ".join(str(message).split())[:500])
        return cls(False, None, error, line, protocol.printable(str(traceback)[-8000:]))

    def to_dict(self) -> dict:
        return {"ok": self.ok, "value": self.value, "error": self.error, "message": self.message,
                "traceback": self.traceback}  # fmt: skip


def _from_reply(reply: Any, method: str) -> CallResult:
    """The one door for what a worker sends back: a CallResult whose value host code can use as it likes.

    `method` is the call it answers (load, reset, step, hint, ...). A malformed reply is 'crashed', a value that
    is not plain data or not of the method's shape is 'bad_return' with a one-line reason naming the method.
    """
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return CallResult.failure("crashed", f"{method}(): worker sent a malformed reply")
    if not reply["ok"]:
        error = reply.get("error") if isinstance(reply.get("error"), str) and reply["error"] in ERROR_KINDS else None
        tb = reply.get("traceback") if isinstance(reply.get("traceback"), str) else ""
        return CallResult.failure(error or "crashed", str(reply.get("message") or error or "failed"), tb)
    try:
        value = protocol.clean_value(reply.get("value"))
    except ValueError as e:
        return CallResult.failure("bad_return", f"{method}(): returned {e}")
    check = _SHAPES.get(method)
    problem = check(value) if check else ""
    if problem:
        return CallResult.failure("bad_return", f"{method}() {problem}")
    if method == "step":
        value[1] = float(value[1])
    return CallResult(True, value)


def _kind(value: Any) -> str:
    """A short name for what a value is (no repr: a huge int or string stays out of the message)."""
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"int with {len(str(abs(value)))} digits"
    if isinstance(value, bool | int | float) or value is None:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def _check_reset(value: Any) -> str:
    """'' when `value` is [observation: str, info: dict]."""
    if not isinstance(value, list) or len(value) != 2:
        return f"must return (observation, info), got {_kind(value)}"
    if not isinstance(value[0], str):
        return f"observation must be a str, got {_kind(value[0])}"
    if not isinstance(value[1], dict):
        return f"info must be a dict, got {_kind(value[1])}"
    return ""


def _check_step(value: Any) -> str:
    """'' when `value` is [observation: str, reward: finite real, terminated: bool, truncated: bool, info: dict]."""
    if not isinstance(value, list) or len(value) != 5:
        got = len(value) if isinstance(value, list) else type(value).__name__
        return f"must return a 5-tuple (obs, reward, terminated, truncated, info), got {got}"
    obs, reward, terminated, truncated, info = value
    if not isinstance(obs, str):
        return f"observation must be a str, got {_kind(obs)}"
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return f"reward must be a float, got {_kind(reward)}"
    try:
        finite = math.isfinite(float(reward))
    except OverflowError:  # an int beyond the float range, e.g. 10**400
        finite = False
    if not finite:
        return f"reward must be a finite float, got {_kind(reward)} (beyond the float range)"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool):
            return f"{name} must be a bool, got {_kind(flag)}"
    if not isinstance(info, dict):
        return f"info must be a dict, got {_kind(info)}"
    return ""


def _check_hint(value: Any) -> str:
    """'' when `value` is a str or None (no hint)."""
    return "" if value is None or isinstance(value, str) else f"must return a str, got {_kind(value)}"


def _check_load(value: Any) -> str:
    """'' when `value` is the episode's description of the loaded env (a forged one is refused)."""
    ok = (
        isinstance(value, dict)
        and isinstance(value.get("env_class"), str)
        and all(isinstance(value.get(k), list) for k in ("methods", "dropped_kwargs"))
        and all(isinstance(m, str) for m in value["methods"] + value["dropped_kwargs"])
    )
    return "" if ok else "sent a malformed description of the environment (forged reply?)"


_SHAPES = {"reset": _check_reset, "step": _check_step, "hint": _check_hint, "load": _check_load}


class _Worker:
    """One running sandbox and the client side of its channel."""

    def __init__(self, launcher: Launcher):
        self.proc, self.facts = start_worker(launcher)
        self.limit = launcher.config.max_return_bytes + 65536
        self.dead = ""  # why it can no longer serve

    def alive(self) -> bool:
        return not self.dead and self.proc.alive()

    def kill(self, why: str) -> None:
        self.dead = self.dead or why
        self.proc.kill()

    def request(self, msg: dict, timeout: float, what: str) -> CallResult:
        """Sends one request; the host-side deadline (timeout + grace) kills the sandbox if it is passed."""
        if not self.alive():
            return CallResult.failure("crashed", f"{what}: the worker is gone ({self.dead or 'it exited'})")
        try:
            data = protocol.encode({**msg, "timeout": timeout})
        except (TypeError, ValueError) as e:
            return CallResult.failure("exception", f"{what}: arguments are not JSON-safe ({e})")
        method = str(msg.get("method") or msg.get("op"))
        deadline = time.monotonic() + timeout + 1.0 + 0.25 * timeout
        bounds = self.proc.bound_events()
        try:
            protocol.write_frame(self.proc.stdin_fd, data, deadline)
            reply = self.proc.reader.read(deadline, self.limit)
        except protocol.ChannelError as e:
            if e.kind == "timeout":
                self.kill(f"{what} hung")
                return CallResult.failure("timeout", f"{what} did not return within {timeout:g} s (sandbox killed)")
            time.sleep(0.05)  # let the stderr drain catch the runtime's last words
            tail = self.proc.stderr_tail().splitlines()[-1:] if e.kind == "closed" else []
            died = CallResult.failure("crashed", f"{what}: sandbox died ({e}){': ' + tail[0] if tail else ''}")
            result = self._over_bounds(died, bounds, what)
            self.kill(f"{what}: {e}")
            return result
        except (OSError, ValueError) as e:  # the channel's fds went away under us (the sandbox was killed meanwhile)
            self.kill(f"{what}: {e}")
            return CallResult.failure("crashed", f"{what}: worker channel error ({e})")
        return self._over_bounds(_from_reply(reply, method), bounds, what)

    def _over_bounds(self, result: CallResult, before: tuple[int, int, int], what: str) -> CallResult:
        """The environment's memory failure when the kernel killed a process of this sandbox for its total
        memory bound during the call (whatever the call returned), or the call crashed or hung while the bound
        refused memory (its children, files or segments together went over it); a crash or hang at the process
        bound says so. Refusals alone are not enough: reclaiming page cache at the bound counts as one."""
        if self.proc.cgroup is None or result.error == "memory":
            return result
        now = self.proc.bound_events()
        refused, killed, forks = (b - a for a, b in zip(before, now))
        failed = result.error in ("crashed", "timeout")
        limits = self.proc.cgroup.limits
        if killed or (refused and failed):
            bound = f"total memory bound ({limits.memory_mb} MB)"
            return CallResult.failure("memory", f"{what}: the sandbox went over its {bound}")
        if forks and failed:
            return CallResult.failure("crashed", f"{what}: the sandbox went over its process bound ({limits.pids})")
        return result


class EnvSession:
    """One environment loaded in one worker. Use from one thread at a time; close() frees the worker."""

    def __init__(self, pool: HostPool, worker: _Worker | None, load_result: CallResult):
        self._pool, self._worker, self.load_result = pool, worker, load_result
        self.level = pool.level
        self._lock = threading.Lock()
        self._closed = False

    def _call(self, method: str, args: list, msg: dict | None = None) -> CallResult:
        with self._lock:
            if self._closed:
                return CallResult.failure("crashed", f"{method}(): the session is closed")
            if not self.load_result.ok or self._worker is None:
                return self.load_result
            msg = msg or {"op": "call", "method": method, "args": args}
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
        """Ends the session and returns the worker to the pool (replaced there if it died or hung)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            self._pool._release(worker)

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class HostPool:
    """N long-lived sandboxed workers (started on demand), reused across sessions, replaced when they die."""

    def __init__(self, num_workers: int = 4, sandbox: SandboxConfig | None = None):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.sandbox = sandbox or SandboxConfig()
        remove_stale_dirs()  # temp dirs of runs that died without closing their pool
        self.level = detect_level(self.sandbox.level, self.sandbox)
        log.info("host pool: up to %d workers, sandbox level %s", num_workers, self.level)
        self._launcher = Launcher(self.sandbox, self.level)
        self._cv = threading.Condition()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._slots = 0  # workers running or starting
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self.stats: Counter = Counter()
        self._replacing: set[threading.Thread] = set()  # replacement workers starting in the background

    # workers ---------------------------------------------------------------------------------------------
    def _start(self) -> _Worker:
        worker = _Worker(self._launcher)
        with self._cv:
            self.stats["workers_started"] += 1
            if self._closed:
                worker.kill("pool closed")
                raise SandboxUnavailable("the pool is closed")
            self._live.add(worker)
        return worker

    def _acquire(self) -> _Worker | CallResult:
        with self._cv:
            while True:
                if self._closed:
                    return CallResult.failure("crashed", "the host pool is closed")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    self._discard(worker)
                    self._slots -= 1
                if self._slots < self.num_workers:
                    self._slots += 1
                    break
                self._cv.wait()
        try:
            return self._start()
        except (SandboxUnavailable, OSError) as e:
            with self._cv:
                self._slots -= 1
                self._cv.notify()
            return CallResult.failure("crashed", f"could not start a sandbox: {e}")

    def _discard(self, worker: _Worker) -> None:
        worker.kill(worker.dead or "discarded")
        self._live.discard(worker)

    def _release(self, worker: _Worker) -> None:
        """Ends the worker's session (it cleans up before it answers) and makes it idle again, or replaces it when
        that fails; never raises, so no worker is ever lost to the pool (a lost one would deadlock open())."""
        try:
            ended = worker.alive() and worker.request({"op": "end"}, self.sandbox.call_timeout_s, "close()").ok
        except Exception as e:  # a last line of defence: request() reports failures as results
            log.warning("closing a session failed: %s", protocol.printable(e))
            ended = False
        if ended:
            with self._cv:
                self._idle.append(worker)
                self._cv.notify()
            return
        worker.kill("it failed")
        with self._cv:
            self._live.discard(worker)
            self.stats["workers_replaced"] += 1
            if self._closed:
                self._slots -= 1
                return
            t = threading.Thread(target=self._replace, name="sandbox-replace", daemon=True)
            self._replacing.add(t)
        t.start()

    def _replace(self) -> None:
        """Starts a replacement worker in the background so the next open() does not pay the start."""
        try:
            worker = self._start()
        except (SandboxUnavailable, OSError) as e:
            with self._cv:
                self._slots -= 1
                self._cv.notify()
                self._replacing.discard(threading.current_thread())
                if self._closed:
                    return
            log.warning("could not replace a sandbox worker: %s", e)
            return
        with self._cv:
            self._idle.append(worker)
            self._cv.notify()
            self._replacing.discard(threading.current_thread())

    def _count(self, result: CallResult) -> None:
        with self._cv:
            self.stats["calls"] += 1
            if not result.ok:
                self.stats[f"error_{result.error}"] += 1

    # public API ---------------------------------------------------------------------------------------------
    def warm_up(self, n: int | None = None) -> None:
        """Starts up to `n` (default all) workers now, in parallel, instead of on first use."""
        n = min(n or self.num_workers, self.num_workers)
        got = self.map(lambda _: self._acquire(), range(n))
        for w in got:
            if isinstance(w, _Worker):
                with self._cv:
                    self._idle.append(w)
                    self._cv.notify()

    def open(self, source: str, *, env_kwargs: dict | None = None) -> EnvSession:
        """Loads `source` in a free worker (blocks until one is free); load failures are in `load_result`."""
        if not isinstance(source, str):
            return EnvSession(self, None, CallResult.failure("load_error", "source must be a str"))
        size = len(source.encode("utf-8", "surrogatepass"))
        if size > self.sandbox.max_source_bytes:
            msg = f"source is {size} bytes (limit {self.sandbox.max_source_bytes})"
            return EnvSession(self, None, CallResult.failure("load_error", msg))
        msg = {"op": "load", "source": source, "kwargs": dict(env_kwargs or {})}
        try:
            protocol.encode(msg["kwargs"])
        except (TypeError, ValueError) as e:
            return EnvSession(self, None, CallResult.failure("load_error", f"env_kwargs are not JSON-safe: {e}"))
        worker = self._acquire()
        if isinstance(worker, CallResult):
            return EnvSession(self, None, worker)
        result = worker.request(msg, self.sandbox.load_timeout_s, "load()")
        with self._cv:
            self.stats["sessions"] += 1
        self._count(result)
        return EnvSession(self, worker, result)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list:
        """fn(item) for every item on a thread pool sized to the workers (sessions run concurrently)."""
        with self._cv:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.num_workers, thread_name_prefix="host-pool")
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        """Kills every worker and removes the pool's temporary files."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            workers = list(self._live)
            self._live.clear()
            self._idle.clear()
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
