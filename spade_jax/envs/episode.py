"""The episode side of the environment worker: framing, and the process that loads and plays one environment.

Runs INSIDE the sandbox, imported by `spade_jax.envs.worker` (the zygote), which forks one episode process per
session; see that module for the process model. STANDARD LIBRARY ONLY. The episode process runs untrusted
environment code, so every helper it needs is bound privately (default arguments, attributes) before that code
can replace module attributes or builtins.
"""

from __future__ import annotations

import json
import os
import select
import struct
import sys
import time

HEADER = struct.Struct(">I")
ENV_FILENAME = "<environment>"
ENV_MODULE = "environment"
CALLABLE = ("reset", "step", "hint", "reference_action", "random_action", "metadata")
_isinstance, _len = isinstance, len  # environment code may replace the builtins


# ------------------------------------------------------------------------------------------- framing


# Default arguments bind the functions now: environment code may later replace module attributes.
def send(fd: int, obj: object, _dumps=json.dumps) -> None:
    """Writes one frame (blocking)."""
    data = _dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    write_all(fd, HEADER.pack(_len(data)) + data)


def write_all(fd: int, data: bytes, _write=os.write) -> None:
    view = memoryview(data)
    while view:
        view = view[_write(fd, view) :]


def _read_exact(
    fd: int, n: int, deadline: float | None, _read=os.read, _select=select.select, _now=time.monotonic
) -> bytes | None:
    """n bytes, None on EOF; raises TimeoutError past `deadline` (monotonic)."""
    buf = bytearray()
    while _len(buf) < n:
        if deadline is not None:
            left = deadline - _now()
            if left <= 0 or not _select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = _read(fd, min(n - _len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_raw(fd: int, limit: int, deadline: float | None = None) -> bytes | None:
    """One frame's body; None on EOF; ValueError when the frame exceeds `limit`."""
    head = _read_exact(fd, HEADER.size, deadline)
    if head is None:
        return None
    (size,) = HEADER.unpack(head)
    if size > limit:
        raise ValueError(f"reply of {size} bytes exceeds the {limit}-byte limit")
    return _read_exact(fd, size, deadline)


def fail(error: str, message: str, tb: str = "") -> dict:
    return {"ok": False, "error": error, "message": message[:500], "traceback": tb[-8000:]}


# ----------------------------------------------------------------------------------- episode process


class Episode:
    """Runs inside the forked, unprivileged episode process: loads one env and answers calls."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.env = None
        self.reserve = bytearray(1 << 20)  # freed on MemoryError so the report itself can be built
        import inspect
        import linecache
        import random
        import traceback

        # Keep private references: environment code may replace the module attributes later.
        self.inspect, self.linecache, self.random, self.traceback = inspect, linecache, random, traceback
        self.dumps, self.loads, self.send = json.dumps, json.loads, send

    def serve(self, rfd: int, wfd: int) -> None:
        limit = self.cfg["max_request_bytes"]
        while True:
            raw = recv_raw(rfd, limit)
            if raw is None:
                os._exit(0)
            msg = self.loads(raw)
            reply = self.handle(msg)
            self.send(wfd, reply) if _isinstance(reply, dict) else write_all(wfd, reply)

    def handle(self, msg: dict):
        what = msg.get("method", "load") + "()"
        try:
            if msg["op"] == "load":
                value = self.load(msg["source"], msg.get("kwargs") or {})
            else:
                value = self.call(msg["method"], msg.get("args") or [])
        except MemoryError:
            self.reserve = None
            return fail("memory", f"{what} ran out of memory (limit {self.cfg['memory_mb']} MB)")
        except _Missing as e:
            return fail("exception", str(e))
        except BaseException as e:  # SystemExit, KeyboardInterrupt included: all are the env's fault
            kind = "load_error" if msg["op"] == "load" else "exception"
            return fail(kind, self.one_line(e), self.format_tb(e))
        return self.encode(what, value)

    def encode(self, what: str, value: object) -> bytes | dict:
        try:
            data = self.dumps({"ok": True, "value": value}, separators=(",", ":"), allow_nan=False)
        except MemoryError:
            self.reserve = None
            return fail("memory", f"{what} return value ran out of memory while being encoded")
        except (TypeError, ValueError, RecursionError, OverflowError) as e:
            return fail("bad_return", f"{what} returned a value that is not JSON-safe: {self.one_line(e)}")
        except BaseException as e:
            return fail("bad_return", f"{what} return value could not be encoded: {self.one_line(e)}")
        body = data.encode("utf-8", "surrogatepass")
        cap, size = self.cfg["max_return_bytes"], _len(body)
        if size > cap:
            return fail("bad_return", f"{what} returned {size} bytes of JSON (limit {cap})")
        return HEADER.pack(size) + body

    def one_line(self, e: BaseException) -> str:
        try:
            text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        except BaseException:
            text = type(e).__name__
        return " ".join(text.split())[:400]

    def format_tb(self, e: BaseException) -> str:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # hide the worker's own frames
        try:
            return "".join(self.traceback.format_exception(type(e), e, tb))
        except BaseException:
            return self.one_line(e)

    def load(self, source: str, kwargs: dict) -> dict:
        import types

        self.linecache.cache[ENV_FILENAME] = (len(source), None, source.splitlines(True), ENV_FILENAME)
        module = types.ModuleType(ENV_MODULE)
        module.__file__ = ENV_FILENAME
        sys.modules[ENV_MODULE] = module  # dataclasses and typing look the module up by name
        exec(compile(source, ENV_FILENAME, "exec"), module.__dict__)
        cls = self.find_class(module)
        kwargs, dropped = self.fit_kwargs(cls, kwargs)
        self.env = cls(**kwargs)
        methods = [m for m in CALLABLE[2:] if callable(getattr(self.env, m, None))]
        return {"env_class": cls.__name__, "methods": methods, "dropped_kwargs": dropped}

    def find_class(self, module) -> type:
        named = module.__dict__.get("ENV_CLASS")
        if isinstance(named, str):
            named = module.__dict__.get(named)
            if not isinstance(named, type):
                raise LookupError(f"ENV_CLASS names {module.ENV_CLASS!r}, which is not a class in the file")
        if isinstance(named, type):
            return named
        cands = [
            v
            for v in list(module.__dict__.values())
            if isinstance(v, type) and v.__module__ == ENV_MODULE
            and callable(getattr(v, "reset", None)) and callable(getattr(v, "step", None))
        ]  # fmt: skip
        leaves = [c for c in cands if not any(d is not c and issubclass(d, c) for d in cands)]
        leaves = [c for c in leaves if not self.inspect.isabstract(c)] or leaves
        if len(leaves) == 1:
            return leaves[0]
        if not leaves:
            raise LookupError("no environment class: define a class with reset() and step()")
        names = ", ".join(c.__name__ for c in leaves)
        raise LookupError(f"{len(leaves)} environment classes ({names}); set ENV_CLASS = '<name>'")

    def fit_kwargs(self, cls: type, kwargs: dict) -> tuple[dict, list]:
        try:
            params = self.inspect.signature(cls).parameters
        except (TypeError, ValueError):
            return kwargs, []
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return kwargs, []
        kept = {k: v for k, v in kwargs.items() if k in params}
        return kept, sorted(set(kwargs) - set(kept))

    def call(self, method: str, args: list):
        if self.env is None:
            raise _Missing("no environment is loaded")
        if method not in CALLABLE:
            raise _Missing(f"method {method!r} is not allowed")
        fn = getattr(self.env, method, None)
        if not callable(fn):
            if method == "hint":
                return None
            raise _Missing(f"AttributeError: environment has no method {method!r}")
        if method == "reset":
            seed = args[0] if args else None
            if seed is not None:
                self.random.seed(seed)  # envs that use the global `random` are reproducible too
            return self.call_reset(fn, seed)
        return fn(*args)

    def call_reset(self, fn, seed):
        try:
            params = self.inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return fn(seed=seed)
        if "seed" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return fn(seed=seed)
        return fn(seed) if params and seed is not None else fn()


class _Missing(Exception):
    """A call the env cannot answer (no such method, nothing loaded)."""
