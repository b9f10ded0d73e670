"""The episode side of the environment worker: framing, and the process that loads and plays one environment.

Runs INSIDE the sandbox, imported by `spade_jax.sandbox.inside.worker` (the zygote), which forks one episode process per
session; see that module for the process model. STANDARD LIBRARY ONLY. The episode process runs untrusted
environment code, so every helper it needs is bound privately (default arguments, attributes) before that code
can replace module attributes or builtins.

A reset whose info has no "tools" gets the schemas of the environment's `get_tools()` when it has one (how the
paper's tool environments publish theirs). Besides load and call, the episode answers one request of its own:
`leaks` (is the answer in this hint?), computed here because the hidden state must never leave the sandbox. It
compares the hint with the answer in `reference_action()` (box content, `<answer>` content, or a tool call's
argument values; called on a deep copy of the env, so the episode itself is not disturbed) and with the hidden
state's strings (>= 3 characters) and numbers (>= 2 digits) after reset. Anything the agent already sees in the
first observation is not a leak; for the hidden state, neither is anything written in the source or passed as a
constructor argument. It never raises: a failing reference_action() or state walk is skipped. This is a
heuristic against accidental or lazy leaks, not a defence against environment code that rewrites this module.
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import sys
import time

HEADER = struct.Struct(">I")
# Every request from the zygote to the episode process starts with a fresh random nonce (hex), and the reply must
# start with it: a frame the environment writes to the channel itself, ahead of a request, cannot carry the right
# one, so it cannot pass for the reply to a later call (or desynchronise the ones after it).
NONCE_BYTES = 16
ENV_FILENAME = "<environment>"
ENV_MODULE = "environment"
CALLABLE = ("reset", "step", "hint", "reference_action", "random_action", "metadata")
_isinstance, _len, _type = isinstance, len, type  # environment code may replace the builtins
_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+")
_BOXED, _ANSWER_RE = "\\boxed{", re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
LEAK_WALK_NODES, LEAK_WALK_DEPTH, LEAK_MAX_CHARS = 5000, 4, 200


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


def _as_list(obj: object, _sorted=sorted, _repr=repr, _kinds=(set, frozenset)) -> list:
    """JSON for a set in a returned value (the paper's games put them in `info`): its items sorted by repr, so
    the encoding does not depend on hash order; any other non-JSON object stays a TypeError (bad_return)."""
    if _isinstance(obj, _kinds):
        return _sorted(obj, key=_repr)
    raise TypeError(f"Object of type {_type(obj).__name__} is not JSON serializable")


def fail(error: str, message: str, tb: str = "") -> dict:
    return {"ok": False, "error": error, "message": message[:500], "traceback": tb[-8000:]}


# ----------------------------------------------------------------------------------- episode process


class EpisodeProcess:
    """Runs inside the forked, unprivileged episode process: loads one env and answers calls."""

    def __init__(self, cfg: dict, facts: dict | None = None):
        self.cfg, self.facts = cfg, dict(facts or {})
        self.env = None
        self.source, self.kwargs, self.first_obs = "", {}, ""
        self.reserve = bytearray(1 << 20)  # freed on MemoryError so the report itself can be built
        import copy
        import inspect
        import linecache
        import random
        import traceback

        # Keep private references: environment code may replace the module attributes later.
        self.inspect, self.linecache, self.random, self.traceback = inspect, linecache, random, traceback
        self.deepcopy, self.findall = copy.deepcopy, _TOKEN_RE.findall
        self.dumps, self.loads, self.send = json.dumps, json.loads, send

    def serve(self, rfd: int, wfd: int) -> None:
        """Answers requests until EOF. Each request starts with the zygote's nonce for it, and the reply frame
        starts with the same nonce: a frame the environment writes itself cannot know it (see `NONCE_BYTES`)."""
        limit = self.cfg["max_request_bytes"] + NONCE_BYTES
        while True:
            raw = recv_raw(rfd, limit)
            if raw is None:
                os._exit(0)
            nonce = raw[:NONCE_BYTES]
            reply = self.handle(self.loads(raw[NONCE_BYTES:]))
            if _isinstance(reply, dict):
                reply = self.dumps(reply, separators=(",", ":"), allow_nan=False).encode("utf-8", "surrogatepass")
            write_all(wfd, HEADER.pack(_len(nonce) + _len(reply)) + nonce + reply)

    def handle(self, msg: dict):
        what = str(msg.get("method") or msg["op"]) + "()"
        try:
            if msg["op"] == "load":
                value = self.load(msg["source"], msg.get("kwargs") or {}, allow_exec=msg.get("allow_exec") is True)
            elif msg["op"] == "leaks":
                value = self.leaks(msg.get("hint"))
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
            data = self.dumps({"ok": True, "value": value}, separators=(",", ":"), allow_nan=False, default=_as_list)
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
        return body

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

    def load(self, source: str, kwargs: dict, *, allow_exec: bool = False) -> dict:
        import types

        self.enter_private_dir()
        self.source, self.kwargs = source, dict(kwargs)
        self.linecache.cache[ENV_FILENAME] = (len(source), None, source.splitlines(True), ENV_FILENAME)
        module = types.ModuleType(ENV_MODULE)
        module.__file__ = ENV_FILENAME
        sys.modules[ENV_MODULE] = module  # dataclasses and typing look the module up by name
        code = compile(source, ENV_FILENAME, "exec")
        if self.cfg.get("audit_hook", True) and not self.facts.get("hooked"):
            from spade_jax.sandbox.inside.guard import install_audit_hook

            home = self.cfg["home"] if self.facts.get("own_tmpfs") else os.getcwd()  # its own tmpfs, or its own dir
            install_audit_hook(home, read_roots(), allow_exec=allow_exec)  # every call from here on runs under it
            self.facts["hooked"] = True
        exec(code, module.__dict__)
        cls = self.find_class(module)
        kwargs, dropped = self.fit_kwargs(cls, kwargs)
        self.env = cls(**kwargs)
        methods = [m for m in CALLABLE[2:] if callable(getattr(self.env, m, None))]
        return {"env_class": cls.__name__, "methods": methods, "dropped_kwargs": dropped, "guards": self.facts}

    def enter_private_dir(self) -> None:
        """Moves into a fresh directory of its own in the sandbox's tmp (mode 0700, a random name) and makes it
        TMPDIR and HOME, so relative paths and `tempfile` of sessions sharing a worker never meet. Stays in tmp
        when it cannot make one (tmp full); never raises."""
        for _ in range(4):
            path = os.path.join(self.cfg.get("home") or self.cfg["tmp"], "ep-" + os.urandom(8).hex())
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            except OSError:
                return
            os.chdir(path)
            os.environ.update(TMPDIR=path, HOME=path)
            return

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
        named = [c for c in leaves if c.__name__.endswith("Env")]
        leaves = named if len(leaves) > 1 and len(named) == 1 else leaves  # the paper's rule, as the static gate
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
            value = self.call_reset(fn, seed)
            pair = _isinstance(value, tuple | list) and _len(value) == 2
            first = value[0] if pair else ""
            self.first_obs = first if _type(first) is str else ""
            tools = getattr(self.env, "get_tools", None)  # the paper's tool environments list their schemas there
            if pair and _type(value[1]) is dict and "tools" not in value[1] and callable(tools):
                value = (value[0], {**value[1], "tools": tools()})
            return value
        return fn(*args)

    def call_reset(self, fn, seed):
        try:
            params = self.inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return fn(seed=seed)
        if "seed" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return fn(seed=seed)
        return fn(seed) if params and seed is not None else fn()

    # leak check ------------------------------------------------------------------------------------------
    def leaks(self, hint) -> dict:
        """{"leaked": bool, "by": "answer" | "state" | None}: does `hint` contain the answer or a hidden value?"""
        if self.env is None:
            raise _Missing("no environment is loaded")
        if _type(hint) is not str:
            raise _Missing("leaks() needs the hint as a str")
        text, seen = self.joined(hint), self.joined(self.first_obs)
        for value in self.answer_values():
            cand = self.joined(value)
            if significant(cand) and cand in text and cand not in seen:
                return {"leaked": True, "by": "answer"}
        public = self.joined(self.source + " " + " ".join(str(v) for v in self.kwargs.values()))
        for value in self.state_values():
            cand = self.joined(value)
            if significant(cand) and cand in text and cand not in seen and cand not in public:
                return {"leaked": True, "by": "state"}
        return {"leaked": False, "by": None}

    def joined(self, text: str) -> str:
        """Lower-case word/number tokens, framed by separators so `a in b` is a whole-token match."""
        return "\x01" + "\x01".join(self.findall(text.lower()))[:100000] + "\x01"

    def answer_values(self) -> list:
        """The answer strings in reference_action() (on a copy of the env, RNG states restored); [] on failure."""
        fn = getattr(_type(self.env), "reference_action", None)
        if not callable(fn):
            return []
        state = self.random.getstate()
        try:
            action = self.deepcopy(self.env).reference_action()
        except BaseException:
            return []
        finally:
            self.random.setstate(state)
        return answer_parts(action) if _type(action) is str else []

    def state_values(self) -> list:
        """Strings and numbers in the env's instance state (builtin containers, bounded walk); [] on failure."""
        out: list = []
        try:
            stack, budget = [(v, 0) for v in list(vars(self.env).values())], LEAK_WALK_NODES
            while stack and budget > 0:
                value, depth = stack.pop()
                budget -= 1
                kind = _type(value)
                if kind is str and _len(value) <= LEAK_MAX_CHARS:
                    out.append(value)
                elif kind is int or (kind is float and value == value and value.is_integer()):
                    out.append(str(int(value)))
                elif kind in (list, tuple, set, frozenset) and depth < LEAK_WALK_DEPTH:
                    stack += [(v, depth + 1) for v in list(value)[:LEAK_WALK_NODES]]
                elif kind is dict and depth < LEAK_WALK_DEPTH:
                    stack += [(v, depth + 1) for v in list(value.values())[:LEAK_WALK_NODES]]
        except BaseException:
            return out
        return out


def significant(joined: str) -> bool:
    """A candidate worth matching: >= 2 digits when it is one number, else >= 3 letters/digits in all."""
    body = joined.replace("\x01", "")
    if joined.count("\x01") == 2 and body.replace(".", "").isdigit():
        return _len(body.replace(".", "")) >= 2
    return _len(body) >= 3


def answer_parts(action: str) -> list:
    """Answer strings in an action: its last \\boxed{...}, its <answer>, else its tool calls' argument values."""
    i = action.rfind(_BOXED)
    if i >= 0:
        depth, start = 1, i + _len(_BOXED)
        for j in range(start, _len(action)):
            depth += {"{": 1, "}": -1}.get(action[j], 0)
            if depth == 0:
                return [action[start:j]]
        return [action[start:]]
    found = _ANSWER_RE.search(action)
    if found:
        return [found.group(1)]
    parts = []
    for body in _TOOL_CALL_RE.findall(action):
        try:
            args = json.loads(body).get("arguments")
        except (ValueError, AttributeError):
            continue
        if _isinstance(args, dict):
            parts += [str(v) for v in args.values() if _type(v) in (str, int, float)]
    return parts


def read_roots() -> tuple[str, ...]:
    """What environment code may read besides its own directory: the interpreter's installation (the standard
    library), the package it imports (`spade_jax`'s parent directory) and the time-zone database."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, package, "/usr/share/zoneinfo"}
    return tuple(sorted(p for p in found if p and p != "/"))


class _Missing(Exception):
    """A call the env cannot answer (no such method, nothing loaded)."""
