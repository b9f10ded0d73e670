"""Actions the gates send to an environment: malformed probes and a generic random policy.

The generic policy stands in for an environment's own `random_action(rng)` when it has none: it picks
words and numbers from the latest observation and wraps them in the format of the environment's kind
(`\\boxed{...}`, `<tool_call>...</tool_call>` / `<answer>...</answer>`). Pure standard library.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

__all__ = ["MALFORMED_ACTIONS", "GenericPolicy", "answer_action", "guess_kind", "noop_action", "usable_tools"]

# Replies a careless or adversarial agent sends; an environment must answer each with a valid 5-tuple.
MALFORMED_ACTIONS: tuple[str, ...] = (
    "",
    "   \n\t ",
    "I am not sure what to do.",
    "\\boxed{}",
    "\\boxed{" + "9" * 300 + "}",
    "\\boxed{-1}",
    "\\boxed{\\boxed{1}}",
    "\\boxed{unclosed",
    "<tool_call>{not json</tool_call>",
    '<tool_call>{"name": "no_such_tool", "arguments": {"x": 1}}</tool_call>',
    '<tool_call>{"name": 5, "arguments": []}</tool_call>',
    "<answer></answer>",
    "ünïcödé ∑ 😀 \x00 \\boxed{é}",
    "x" * 4000,
)

_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'-]{0,19}")
_NUM_RE = re.compile(r"-?\d{1,9}(?:\.\d+)?")
_STOP = frozenset(
    "the a an and or of to in on for is are be you your it this that with as at by from if then else not "
    "can will each turn turns reply example e g boxed".split()
)


def guess_kind(observation: str, info: dict | None) -> str:
    """The environment's kind from info['kind'] when present, else from the action format its text asks for."""
    kind = (info or {}).get("kind")
    if kind in ("game", "tool", "reasoning"):
        return kind
    if "<tool_call>" in observation:
        return "tool"
    return "game"


def answer_action(kind: str, text: str) -> str:
    """`text` as a final answer in the format of the environment's kind (`\\boxed{...}` / `<answer>...</answer>`)."""
    return f"<answer>{text}</answer>" if kind == "tool" else "\\boxed{" + text + "}"


def noop_action(kind: str) -> str:
    """A well-formed reply that does nothing useful (an empty box / an empty answer)."""
    return answer_action(kind, "")


class GenericPolicy:
    """Random replies built from the current observation, in the format of the environment's kind."""

    def __init__(self, rng: random.Random, kind: str, tools: list[dict] | None = None, *, lower: bool = True):
        self.rng, self.kind, self.lower = rng, kind, lower  # lower: words lower-cased (else as observed)
        self.tools = usable_tools(tools)
        self.words: list[str] = []
        self.numbers: list[str] = []

    def observe(self, observation: str) -> None:
        """Refreshes the vocabulary the policy draws from."""
        text = observation if isinstance(observation, str) else ""
        words = [w for w in _WORD_RE.findall(text[:8000]) if w.lower() not in _STOP]
        nums = _NUM_RE.findall(text[:8000])
        self.words = list(dict.fromkeys(words))[:200] or ["yes", "no", "up", "down"]
        self.numbers = list(dict.fromkeys(nums))[:100] or ["0", "1", "2", "3"]

    def token(self) -> str:
        """One random answer: a number or word of the observation, a number in its range, or a few of them."""
        r = self.rng.random()
        if r < 0.4:
            return self.rng.choice(self.numbers)
        if r < 0.6:
            hi = max([abs(int(float(n))) for n in self.numbers] + [10])
            return str(self.rng.randint(0, min(hi, 10**6)))
        if r < 0.9:
            word = self.rng.choice(self.words)
            return word.lower() if self.lower else word
        return " ".join(self.rng.choice(self.numbers + self.words) for _ in range(self.rng.randint(2, 3)))

    def _argument(self, prop: dict) -> Any:
        kind = prop.get("type", "string") if isinstance(prop, dict) else "string"
        if kind in ("integer", "number"):
            value = self.rng.choice(self.numbers)
            return int(float(value)) if kind == "integer" else float(value)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "array":
            return [self.token() for _ in range(self.rng.randint(0, 2))]
        if kind == "object":
            return {}
        return self.token()

    def act(self) -> str:
        """One random reply."""
        if self.kind == "tool":
            if not self.tools or self.rng.random() < 0.2:
                return answer_action("tool", self.token())
            fn = self.rng.choice(self.tools)
            props = fn["parameters"]["properties"]
            args = {k: self._argument(p) for k, p in props.items() if isinstance(k, str)}
            return "<tool_call>" + json.dumps({"name": str(fn.get("name", "")), "arguments": args}) + "</tool_call>"
        return answer_action(self.kind, self.token())


def usable_tools(tools: Any) -> list[dict]:
    """The function schemas in an environment's `info["tools"]` (OpenAI style or bare), each with a dict of
    parameter properties; entries of any other shape (the environment wrote them) are skipped."""
    out = []
    for t in tools if isinstance(tools, list) else []:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict):
            continue
        params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
        props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
        out.append({**fn, "parameters": {**params, "properties": props}})
    return out
