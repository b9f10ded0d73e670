"""What crosses from a sandbox into host code: `CallResult`, and `from_reply`, the one door every reply passes.

`from_reply` turns what the episode sent (or forged) into plain data (strings valid UTF-8, nesting bounded, see
`protocol.clean_value`) of the shape its method promises (reset: [str, dict]; step: [str, finite float, bool,
bool, dict]; hint: str or None; load: the env's description), and the messages of failures into one printable
line. Anything else is that environment's `bad_return`, so no host code downstream (tokenizer, memory, gates,
CLI) ever sees a value that can make it raise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from spade_jax.sandbox import protocol

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


def from_reply(reply: Any, method: str) -> CallResult:
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
