"""How evaluation runs untrusted or foreign code: in the sandboxed host pool, or in-process for trusted code.

`SandboxRunner(pool)` opens environment sources in `spade_jax.sandbox.host_pool.HostPool` workers; `InProcessRunner`
runs the same sources in this process (only for trusted code: BFCL's own backends in tests, our seed envs).
Both hand back sessions with `reset(seed)`, `call(method, *args)` and `close()` returning results with
`ok`, `value`, `error` and `message`, the host pool's `CallResult` shape.
"""

from __future__ import annotations

import sys
import threading
import traceback
import types
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["InProcessRunner", "Outcome", "Runner", "SandboxRunner", "default_runner"]


@dataclass
class Outcome:
    """Result of one call: `ok` and `value`, or `error` (timeout, exception, ...) with a message."""

    ok: bool
    value: Any = None
    error: str | None = None
    message: str = ""
    traceback: str = ""


class Runner(Protocol):
    """Opens an environment source with constructor kwargs; returns a session."""

    level: str

    def open(self, source: str, env_kwargs: dict | None = None, *, allow_exec: bool = False) -> Any: ...

    def close(self) -> None: ...


_LOCK = threading.Lock()  # in-process sessions share sys.modules: one call at a time


class _InProcessSession:
    def __init__(self, source: str, env_kwargs: dict | None):
        with _LOCK:
            self._load(source, env_kwargs)

    def _load(self, source: str, env_kwargs: dict | None) -> None:
        from spade_jax.envs.base import TextEnv

        self.env = None
        self.load_result = Outcome(True)
        try:
            module = types.ModuleType(f"spade_eval_env_{id(self)}")
            sys.modules[module.__name__] = module
            exec(compile(source, "<environment>", "exec"), module.__dict__)
            classes = [
                v
                for v in module.__dict__.values()
                if isinstance(v, type) and issubclass(v, TextEnv) and v.__module__ == module.__name__
            ]
            if len(classes) != 1:
                raise ValueError(f"expected one environment class, found {len(classes)}")
            self.env = classes[0](**(env_kwargs or {}))
        except Exception as e:
            self.load_result = Outcome(False, error="load_error", message=f"{type(e).__name__}: {e}",
                                       traceback=traceback.format_exc())  # fmt: skip

    def _do(self, fn, *args) -> Outcome:
        if self.env is None:
            return self.load_result
        try:
            with _LOCK:
                return Outcome(True, fn(*args))
        except Exception as e:
            return Outcome(
                False, error="exception", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()
            )

    def reset(self, seed: int | None = None) -> Outcome:
        return self._do(lambda s: self.env.reset(s), seed)

    def step(self, action: str) -> Outcome:
        return self._do(lambda a: self.env.step(a), action)

    def hint(self) -> Outcome:
        return self._do(lambda: self.env.hint())

    def call(self, method: str, *args: Any) -> Outcome:
        if method.startswith("_"):
            return Outcome(False, error="exception", message=f"private method {method!r}")
        return self._do(lambda: getattr(self.env, method)(*args))

    def close(self) -> Outcome:
        self.env = None
        return Outcome(True)


class InProcessRunner:
    """Runs environment sources in this process: for TRUSTED code only (no isolation at all)."""

    level = "in-process"
    capacity = 1 << 16  # sessions that may be open at once

    def open(self, source: str, env_kwargs: dict | None = None, *, allow_exec: bool = False) -> _InProcessSession:
        return _InProcessSession(source, env_kwargs)

    def close(self) -> None:
        pass


class SandboxRunner:
    """Opens sources in the sandboxed host pool (gVisor / bwrap / process, whatever the pool chose)."""

    def __init__(
        self,
        pool: Any = None,
        *,
        workers: int = 4,
        level: str = "auto",
        call_timeout_s: float = 10.0,
        max_return_bytes: int = 4 << 20,
    ):
        self._own = pool is None
        if pool is None:
            from spade_jax.sandbox.host_pool import HostPool
            from spade_jax.sandbox.launchers import SandboxConfig

            config = SandboxConfig(level=level, call_timeout_s=call_timeout_s, max_return_bytes=max_return_bytes)
            pool = HostPool(workers, sandbox=config)
        self.pool = pool
        # each open session holds one of the pool's session slots (workers x sessions per worker)
        self.capacity = int(getattr(pool, "capacity", getattr(pool, "num_workers", workers)))
        self.level = str(getattr(pool, "level", getattr(getattr(pool, "sandbox", None), "level", level)))

    def open(self, source: str, env_kwargs: dict | None = None, *, allow_exec: bool = False) -> Any:
        """A session of `source`; `allow_exec` only for the trusted runner of candidate programs (code_exec)."""
        return self.pool.open(source, env_kwargs=env_kwargs or {}, allow_exec=allow_exec)

    def close(self) -> None:
        if self._own:
            self.pool.close()


def default_runner(sandbox: str = "auto", workers: int = 4) -> Runner:
    """The sandboxed pool; `sandbox="none"` gives the in-process runner (trusted code only)."""
    if sandbox == "none":
        return InProcessRunner()
    return SandboxRunner(workers=workers, level=sandbox)
