"""Base classes every environment (hand-written seed or model-generated) is built on.

STANDARD LIBRARY ONLY: this module is imported inside the sandbox by generated code. It owns turn
counting, truncation, reward checks, tool dispatch and (through envs/parsing.py, re-exported here) the
`\\boxed{...}` and tool-call parsing, so that generated code only writes the hidden state, the rules and the
win check.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
import re
from typing import Any

from spade_jax.envs.outcome import is_win, reward_problem
from spade_jax.envs.parsing import (
    TOOL_CLOSE,
    TOOL_OPEN,
    canonical_action,
    extract_answer,
    extract_boxed,
    parse_tool_call,
    parse_tool_calls,
    reference_boxed_answer,
)

__all__ = [
    "ContractError",
    "GameEnv",
    "KINDS",
    "TOOL_INSTRUCTIONS",
    "ReasoningEnv",
    "TextEnv",
    "ToolEnv",
    "ToolError",
    "canonical_action",
    "extract_answer",
    "extract_boxed",
    "reference_boxed_answer",
    "parse_tool_call",
    "parse_tool_calls",
    "tool",
]

KINDS = ("game", "tool", "reasoning")
EPISODE_OVER = "The episode is over. Call reset() to start a new one."


class ContractError(Exception):
    """Raised when an environment breaks the contract (bad hook return, reward out of range...)."""


class ToolError(Exception):
    """Raise inside a tool to report a failure to the agent (e.g. 'file not found')."""


# ------------------------------------------------------------------------------------------- TextEnv


class TextEnv:
    """Text-in/text-out environment: `reset(seed) -> (obs, info)`, `step(action) -> 5-tuple`.

    Subclasses usually derive from GameEnv, ToolEnv or ReasoningEnv and fill in `setup()` plus a
    kind-specific hook. Use `self.rng` (seeded by reset) for ALL randomness so episodes are deterministic.
    Optional methods: `hint() -> str`, `reference_action() -> str`, `random_action(rng) -> str` (rng is a
    `random.Random`; callers may pass an int seed instead, the base converts it).
    """

    KIND: str = "game"
    SKILL: str = ""
    NAME: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Lets every `random_action` accept a `random.Random` or a plain int seed (e.g. sent over RPC)."""
        super().__init_subclass__(**kwargs)
        fn = cls.__dict__.get("random_action")
        if callable(fn) and not getattr(fn, "accepts_int_seed", False):

            @functools.wraps(fn)
            def random_action(self, rng: random.Random | int | None = None) -> str:
                return fn(self, rng if isinstance(rng, random.Random) else random.Random(rng))

            random_action.accepts_int_seed = True
            cls.random_action = random_action

    def __init__(self, max_turns: int = 25, **kwargs: Any) -> None:
        self.max_turns = int(max_turns)
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.options = dict(kwargs)
        self.rng = random.Random(0)
        self.turn = 0
        self.done = False
        self.won = False
        self.episode_return = 0.0

    # Hooks for subclasses -------------------------------------------------------------------------
    def setup(self) -> str:
        """Creates the hidden state for a new episode with `self.rng`; returns the first observation."""
        raise NotImplementedError

    def handle(self, action: str) -> tuple[str, float, bool]:
        """Applies one raw agent reply; returns (observation, reward, terminated)."""
        raise NotImplementedError

    # Public API ------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        """Starts a new episode; the same seed always gives the same episode.

        The env's generator is seeded with a string derived from `seed`, so a policy that seeds its own
        `random.Random(seed)` with the same number does not replay the hidden state's draws.
        """
        self.rng = random.Random(None if seed is None else f"spade-env:{seed}")
        self.turn = 0
        self.done = False
        self.won = False
        self.episode_return = 0.0
        obs = self.setup()
        if not isinstance(obs, str) or not obs.strip():
            raise ContractError(f"setup() must return a non-empty str, got {type(obs).__name__}")
        return obs, self.info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Consumes one agent reply; every call counts as a turn, episodes end within max_turns."""
        if self.done:
            return EPISODE_OVER, 0.0, True, False, self.info()
        if not isinstance(action, str):
            action = "" if action is None else str(action)
        self.turn += 1
        obs, reward, terminated = self._check_result(self.handle(action), "handle")
        self.episode_return = max(-1.0, min(1.0, self.episode_return + reward))
        truncated = False
        if terminated:
            self.won = is_win(self.episode_return)
        elif self.turn >= self.max_turns:
            truncated = True
            obs = f"{obs}\nOut of turns ({self.max_turns}). You lose.".lstrip()
        self.done = terminated or truncated
        return obs, reward, terminated, truncated, self.info()

    def info(self) -> dict:
        """Info dict returned by reset and step."""
        return {
            "kind": self.KIND,
            "turn": self.turn,
            "max_turns": self.max_turns,
            "won": self.won,
            "return": self.episode_return,
        }

    # Helpers for subclasses ------------------------------------------------------------------------
    def win(self, message: str = "You win!", reward: float = 1.0) -> tuple[str, float, bool]:
        """Result tuple that ends the episode as a win."""
        return message, reward, True

    def lose(self, message: str = "You lose.", reward: float = 0.0) -> tuple[str, float, bool]:
        """Result tuple that ends the episode as a loss."""
        return message, reward, True

    @staticmethod
    def _check_result(result: Any, hook: str) -> tuple[str, float, bool]:
        if isinstance(result, str):
            return result, 0.0, False
        if not isinstance(result, tuple | list) or len(result) != 3:
            raise ContractError(f"{hook}() must return str or (observation, reward, done), got {result!r:.80}")
        obs, reward, done = result
        if not isinstance(obs, str):
            raise ContractError(f"{hook}() observation must be str, got {type(obs).__name__}")
        problem = reward_problem(reward)  # the one definition (envs/outcome.py)
        if problem:
            raise ContractError(f"{hook}() {problem}")
        reward = float(reward)
        if not isinstance(done, bool):
            raise ContractError(f"{hook}() done flag must be bool, got {type(done).__name__}")
        return obs, reward, done


# ------------------------------------------------------------------------------------------- GameEnv


class GameEnv(TextEnv):
    """Multi-turn game: the agent's command each turn is the content of its last `\\boxed{...}`.

    Subclass: `setup()` (hidden state + rules + exact action format) and `play(command)` returning
    (observation, reward, done) or just an observation. A reply without a box gets a format reminder
    (no termination, counts as a turn).
    """

    KIND = "game"
    ACTION_EXAMPLE: str = "\\boxed{your command}"

    def play(self, command: str) -> tuple[str, float, bool] | str:
        """Applies one command (box content, stripped)."""
        raise NotImplementedError

    def handle(self, action: str) -> tuple[str, float, bool]:
        command = extract_boxed(action)
        if command is None:
            return self.format_reminder(), 0.0, False
        return self._check_result(self.play(command), "play")

    def format_reminder(self) -> str:
        """Observation sent when the reply has no `\\boxed{...}` command."""
        return f"Invalid format: put your command inside \\boxed{{}}, e.g. {self.ACTION_EXAMPLE}."

    @staticmethod
    def boxed(command: Any) -> str:
        """Wraps a command the way the agent must send it (use in reference_action/random_action)."""
        return f"\\boxed{{{command}}}"


# ----------------------------------------------------------------------------------------- ToolEnv

_PY_TO_JSON = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}


def tool(description: str, /, **param_docs: str):
    """Marks a ToolEnv method as a tool; its schema comes from the signature and `param_docs`.

    Example: `@tool("Read a file.", path="absolute path")` on `def read_file(self, path: str)`.
    """

    def mark(fn):
        fn.__tool__ = (description, dict(param_docs))
        return fn

    return mark


def _schema_from_method(name: str, fn: Any) -> dict:
    description, docs = fn.__tool__
    props: dict[str, dict] = {}
    required: list[str] = []
    for pname, p in inspect.signature(fn).parameters.items():
        if pname == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = p.annotation
        ann = ann if isinstance(ann, str) else getattr(ann, "__name__", "str")
        prop = {"type": _PY_TO_JSON.get(ann.split("[")[0].split("|")[0].strip(), "string")}
        if pname in docs:
            prop["description"] = docs[pname]
        props[pname] = prop
        if p.default is p.empty:
            required.append(pname)
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def _coerce(value: Any, kind: str) -> Any:
    """Value converted to JSON-schema type `kind`; raises ValueError when it cannot be."""
    if kind == "integer":
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return int(value)
        raise ValueError
    if kind == "number":
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int | float):
            return value
        return float(value)
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ValueError
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise ValueError
    if kind == "array" and not isinstance(value, list):
        raise ValueError
    if kind == "object" and not isinstance(value, dict):
        raise ValueError
    return value


TOOL_INSTRUCTIONS = (
    'Call one tool per turn with <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>. '
    "When done, reply <answer>...</answer>."
)


class ToolEnv(TextEnv):
    """Multi-turn tool use against a simulated backend.

    Subclass: `setup()` builds the backend state with `self.rng` and returns the task text; tools are
    methods marked `@tool(...)` (or listed in `TOOLS` as OpenAI function schemas, dispatched to the
    method of the same name); `check_answer(answer)` returns True/False (or a reward) when the agent
    sends `<answer>...</answer>`, and may inspect the backend state. Tools raise ToolError (or any
    exception) to report a failure to the agent.
    """

    KIND = "tool"
    TOOLS: list[dict] = []
    MAX_CALLS_PER_TURN = 5

    def check_answer(self, answer: str) -> bool | float:
        """Verifies the final answer (and/or the backend state)."""
        raise NotImplementedError

    # Schemas and dispatch -------------------------------------------------------------------------
    def tool_schemas(self) -> list[dict]:
        """OpenAI-style function schemas of all tools (TOOLS entries plus @tool methods)."""
        schemas: dict[str, dict] = {}
        for entry in self.TOOLS:
            fn = entry.get("function", entry)
            schemas[fn["name"]] = {"type": "function", "function": dict(fn)}
        for name in dir(type(self)):
            attr = getattr(type(self), name, None)
            if callable(attr) and hasattr(attr, "__tool__"):
                schemas[name] = _schema_from_method(name, attr)
        return list(schemas.values())

    def tool_names(self) -> list[str]:
        """Names of all tools."""
        return [s["function"]["name"] for s in self.tool_schemas()]

    def call_tool(self, name: str, arguments: dict) -> str:
        """Runs one tool; returns the observation text (result or error)."""
        schemas = {s["function"]["name"]: s["function"] for s in self.tool_schemas()}
        if name not in schemas:
            return f"Error: unknown tool '{name}'. Available: {', '.join(schemas)}."
        method = getattr(self, name, None)
        if not callable(method):
            raise ContractError(f"tool '{name}' is declared but the env has no method '{name}'")
        params = schemas[name].get("parameters", {})
        props = params.get("properties", {})
        missing = [p for p in params.get("required", []) if p not in arguments]
        if missing:
            return f"Error in {name}: missing argument(s) {', '.join(missing)}."
        unknown = [a for a in arguments if a not in props]
        if unknown:
            return f"Error in {name}: unknown argument(s) {', '.join(unknown)}."
        args = {}
        for key, value in arguments.items():
            kind = props[key].get("type", "string")
            try:
                args[key] = _coerce(value, kind)
            except (ValueError, TypeError):
                return f"Error in {name}: argument '{key}' must be {kind}."
        try:
            result = method(**args)
        except ContractError:
            raise
        except Exception as e:  # a tool failure is information for the agent, not a crash
            if isinstance(e, KeyError) and len(e.args) == 1:
                msg = f"not found: {e.args[0]!r}"
            else:
                msg = e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
            return f"Error in {name}: {msg or type(e).__name__}"
        if not isinstance(result, str):
            result = json.dumps(result, default=str)
        return f"Result of {name}: {result}"

    def handle(self, action: str) -> tuple[str, float, bool]:
        calls = parse_tool_calls(action)
        if calls:
            parts = []
            for call in calls[: self.MAX_CALLS_PER_TURN]:
                if isinstance(call, str):
                    parts.append(f"Error: {call}.")
                else:
                    parts.append(self.call_tool(call["name"], call["arguments"]))
            if len(calls) > self.MAX_CALLS_PER_TURN:
                parts.append(f"(Only the first {self.MAX_CALLS_PER_TURN} tool calls were run.)")
            return "\n".join(parts), 0.0, False
        answer = extract_answer(action)
        if answer is None:
            return self.format_reminder(), 0.0, False
        verdict = self.check_answer(answer)
        if isinstance(verdict, bool):
            reward = 1.0 if verdict else 0.0
        elif isinstance(verdict, int | float):
            reward = verdict  # step() checks the range; float() here would raise OverflowError on 10**400
        else:
            raise ContractError(f"check_answer() must return bool or a number, got {type(verdict).__name__}")
        msg = "Correct. Task complete." if is_win(reward) else "Incorrect. Task failed."
        return msg, reward, True

    def format_reminder(self) -> str:
        """Observation sent when the reply has neither a tool call nor an answer."""
        return (
            'Invalid format: call a tool with <tool_call>{"name": "...", "arguments": {...}}</tool_call> '
            "or finish with <answer>...</answer>."
        )

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        """The observation is the task, the textual tool list and the protocol line; `info` also carries them
        apart (`task`, `tools` as OpenAI function schemas, `instructions`) so that a runner whose chat template
        renders tools natively can show the schemas its own way instead of the textual list."""
        task, info = super().reset(seed)
        schemas = self.tool_schemas()
        lines = [json.dumps(s["function"], separators=(",", ":")) for s in schemas]
        obs = f"{task}\n\nTools:\n" + "\n".join(lines) + f"\n\n{TOOL_INSTRUCTIONS}"
        info.update(task=task, tools=schemas, instructions=TOOL_INSTRUCTIONS)
        return obs, info

    # Helpers for reference/random policies --------------------------------------------------------
    @staticmethod
    def call(name: str, **arguments: Any) -> str:
        """A well-formed tool-call action string."""
        return f"{TOOL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{TOOL_CLOSE}"

    @staticmethod
    def answer(text: Any) -> str:
        """A well-formed final-answer action string."""
        return f"<answer>{text}</answer>"

    def random_action(self, rng: random.Random) -> str:
        """Default random policy: a random tool with random arguments, or (20%) a random answer."""
        if rng.random() < 0.2:
            return self.answer(rng.choice(["yes", "no", "done", str(rng.randint(0, 100))]))
        fn = rng.choice(self.tool_schemas())["function"]
        args = {}
        for key, prop in fn.get("parameters", {}).get("properties", {}).items():
            kind = prop.get("type", "string")
            if kind == "integer":
                args[key] = rng.randint(0, 100)
            elif kind == "number":
                args[key] = round(rng.uniform(0, 100), 2)
            elif kind == "boolean":
                args[key] = rng.random() < 0.5
            else:
                args[key] = "".join(rng.choice("abcdefghij0123456789") for _ in range(rng.randint(1, 6)))
        return self.call(fn["name"], **args)


# -------------------------------------------------------------------------------------- ReasoningEnv


class ReasoningEnv(TextEnv):
    """A question with a verified answer, given in `\\boxed{...}`; up to MAX_ATTEMPTS tries.

    Subclass: `setup()` sets the hidden answer and returns the question; `check_answer(answer)`
    returns True/False. The base appends the answer-format instruction to the question.
    """

    KIND = "reasoning"
    MAX_ATTEMPTS = 1

    def check_answer(self, answer: str) -> bool:
        """True when the boxed answer is correct."""
        raise NotImplementedError

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        self.attempts = 0
        question, info = super().reset(seed)
        tries = "one attempt" if self.MAX_ATTEMPTS == 1 else f"{self.MAX_ATTEMPTS} attempts"
        return f"{question}\n\nGive your final answer as \\boxed{{answer}}. You have {tries}.", info

    def handle(self, action: str) -> tuple[str, float, bool]:
        answer = extract_boxed(action)
        if answer is None:
            return "Invalid format: give your final answer as \\boxed{answer}.", 0.0, False
        verdict = self.check_answer(answer)
        if not isinstance(verdict, bool | int | float):
            raise ContractError(f"check_answer() must return bool, got {type(verdict).__name__}")
        self.attempts += 1
        if is_win(verdict):  # not float(): an int beyond the float range would raise OverflowError
            return self.win("Correct!")
        if self.attempts >= self.MAX_ATTEMPTS:
            return self.lose("Incorrect.")
        return f"Incorrect. {self.MAX_ATTEMPTS - self.attempts} attempt(s) left.", 0.0, False

    @staticmethod
    def boxed(answer: Any) -> str:
        """A well-formed answer action string."""
        return f"\\boxed{{{answer}}}"

    @staticmethod
    def same_number(a: str, b: Any, tol: float = 1e-6) -> bool:
        """True when string `a` parses (int, float, fraction p/q) to a value within tol of `b`."""
        try:
            s = a.replace(",", "").replace(" ", "").strip("$")
            if "/" in s:
                p, q = s.split("/", 1)
                value = float(p) / float(q)
            else:
                value = float(s)
        except (ValueError, ZeroDivisionError):
            return False
        return abs(value - float(b)) <= tol * max(1.0, abs(float(b)))
