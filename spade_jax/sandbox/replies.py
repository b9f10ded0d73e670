"""What crosses from a sandbox into host code: `CallResult`, and `from_reply`, the one door every reply passes.

`from_reply` turns what the episode sent (or forged) into plain data (strings valid UTF-8, nesting bounded, see
`protocol.clean_value`) of the shape its method promises (reset: [str, dict]; step: [str, finite float, bool,
bool, dict]; hint: str or None; load: the env's description), and the messages of failures into one printable
line. Anything else is that environment's `bad_return`, so no host code downstream (tokenizer, memory, gates,
CLI) ever sees a value that can make it raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spade_jax.envs.outcome import reset_problem, step_problem
from spade_jax.sandbox import protocol

# The environment's failures (its designer answers for them): timeout, crashed (its process died: an exit, a
# signal), memory, bad_return, exception, load_error. "unavailable" is the host's: the sandbox could not start
# or died, the pool closed, or the call was starved of CPU by others; it is never held against an environment.
ERROR_KINDS = ("timeout", "crashed", "memory", "bad_return", "exception", "load_error", "unavailable")
ENV_FAULTS = ERROR_KINDS[:-1]


@dataclass
class CallResult:
    """Outcome of one call into a sandboxed environment; `ok` False carries a structured `error`."""

    ok: bool
    value: Any = None  # reset -> [obs, info]; step -> [obs, reward, terminated, truncated, info]; hint -> str|None
    error: str | None = None  # None | one of ERROR_KINDS
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
        return CallResult.failure("unavailable", f"{method}(): worker sent a malformed reply")
    if not reply["ok"]:
        error = reply.get("error") if isinstance(reply.get("error"), str) and reply["error"] in ERROR_KINDS else None
        tb = reply.get("traceback") if isinstance(reply.get("traceback"), str) else ""
        return CallResult.failure(error or "unavailable", str(reply.get("message") or error or "failed"), tb)
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


def _check_reset(value: Any) -> str:
    """'' when `value` is [observation: str, info: dict] (`envs.outcome.reset_problem`)."""
    return reset_problem(value)


def _check_step(value: Any) -> str:
    """'' when `value` is [observation, finite real reward, terminated, truncated, info]; a reward out of [-1, 1]
    passes here: the caller counts it as the environment breaking its contract (`envs.outcome.step_problem`)."""
    return step_problem(value, reward_range=False)


def _kind(value: Any) -> str:
    return type(value).__name__


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
