"""Scores BFCL multi-turn call sequences by running BFCL's executable backends in the sandbox.

`backend_source()` builds one stdlib-only environment file (our driver `bfcl_sandbox_env.py` with the
backend modules of the installed `bfcl-eval` embedded as text); `BfclSession` plays one entry through a
runner session; `score_calls` applies BFCL's multi-turn verdict to a given call sequence (used for the
ground-truth self-check and for recorded agent runs).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from spade_jax.eval.bfcl_data import BfclItem, bfcl_root

__all__ = ["BfclSession", "backend_source", "ground_truth_steps", "score_calls"]

_DRIVER = Path(__file__).with_name("bfcl_sandbox_env.py")
_MODULES = (
    "long_context",
    "gorilla_file_system",
    "math_api",
    "message_api",
    "posting_api",
    "ticket_api",
    "trading_bot",
    "travel_booking",
    "vehicle_control",
)
_PLACEHOLDER = "_SOURCES: dict[str, str] = {}"


def _without_unused_subprocess(text: str) -> str:
    """A backend module's text without an `import subprocess` it never uses (gorilla_file_system's): the sandbox
    refuses that import, and the module runs no process."""
    if "subprocess." in text:
        return text
    return "\n".join("" if line.strip() == "import subprocess" else line for line in text.split("\n"))


@lru_cache(maxsize=1)
def backend_source() -> str:
    """The sandbox environment source: our driver with BFCL's backend modules embedded."""
    code_dir = bfcl_root() / "eval_checker" / "multi_turn_eval" / "func_source_code"
    sources = {}
    for short in _MODULES:
        path = code_dir / f"{short}.py"
        if not path.is_file():
            raise FileNotFoundError(f"BFCL backend {path} is missing (bfcl-eval version changed?)")
        sources[short] = _without_unused_subprocess(path.read_text(encoding="utf-8"))
    driver = _DRIVER.read_text(encoding="utf-8")
    if driver.count(_PLACEHOLDER) != 1:
        raise RuntimeError("bfcl_sandbox_env.py lost its _SOURCES placeholder")
    return driver.replace(_PLACEHOLDER, f"_SOURCES: dict[str, str] = {sources!r}")


class BfclError(RuntimeError):
    """The sandbox failed (not a wrong answer): timeout, crash, load error."""


def _value(res: Any, what: str) -> Any:
    if not res.ok:
        raise BfclError(f"{what}: {res.error}: {(res.message or '').strip()[:300]}")
    return res.value


class BfclSession:
    """One BFCL entry in a runner session: agent steps go to `execute`, turn ends to `end_turn`."""

    def __init__(self, runner: Any, item: BfclItem):
        self.item = item
        kwargs = {
            "initial_config": item.initial_config,
            "involved_classes": item.involved_classes,
            "long_context": item.long_context,
        }
        # the backend is our trusted runner: it compiles the model's calls to run them against BFCL's classes
        # (allow_exec); the sandbox's other rules hold for what it runs
        self.session = runner.open(backend_source(), env_kwargs=kwargs, allow_exec=True)
        load = getattr(self.session, "load_result", None)
        if load is not None and not load.ok:
            raise BfclError(f"load: {load.error}: {load.message}")
        _value(self.session.reset(0), "reset")

    def _request(self, what: str, **payload: Any) -> Any:
        res = self.session.step(json.dumps({"op": what, **payload}))
        value = _value(res, what)
        try:
            answer = json.loads(value[0])
        except (TypeError, ValueError, IndexError, KeyError) as e:
            raise BfclError(f"{what}: malformed answer from the sandbox ({e})") from None
        if isinstance(answer, dict) and "error" in answer and len(answer) == 1:
            raise BfclError(f"{what}: {answer['error']}")
        return answer

    def execute(self, calls: list[str]) -> list[str]:
        """Runs one agent step; returns BFCL-formatted results, one per call."""
        return [str(r) for r in self._request("execute", calls=list(calls))]

    def end_turn(self, ground_truth: list[str]) -> dict:
        """BFCL's per-turn check after the agent finished the turn."""
        return dict(self._request("end_turn", ground_truth=list(ground_truth)))

    def close(self) -> None:
        try:
            self.session.close()
        except Exception:  # a dead worker is the pool's business
            pass


def ground_truth_steps(item: BfclItem) -> list[list[list[str]]]:
    """BFCL's own answer as agent steps: each turn's ground-truth calls as one step (none for empty turns)."""
    return [[list(turn)] if turn else [] for turn in item.ground_truth]


def score_calls(runner: Any, item: BfclItem, steps: list[list[list[str]]]) -> dict:
    """BFCL's multi-turn verdict for `steps[turn][step] = [call strings]`: {"valid", "error_type", ...}."""
    if len(steps) != len(item.ground_truth):
        return {
            "valid": False,
            "error_type": "multi_turn:force_terminated",
            "message": f"{len(steps)} turns played, {len(item.ground_truth)} expected",
        }
    session = BfclSession(runner, item)
    try:
        for turn, (turn_steps, truth) in enumerate(zip(steps, item.ground_truth)):
            for calls in turn_steps:
                if calls:
                    session.execute(calls)
            verdict = session.end_turn(truth)
            if not verdict.get("valid"):
                verdict.setdefault("turn", turn)
                return verdict
        return {"valid": True}
    finally:
        session.close()


def dump_steps(steps: list[list[list[str]]]) -> str:
    """Compact JSON of a call sequence (for result files)."""
    return json.dumps(steps, separators=(",", ":"))
