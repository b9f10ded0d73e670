"""The one model-free player: plays an environment episode with replies from a policy, for the gates and the audit.

`play(reset, step, seed, reply, max_turns, pace=...)` resets with `seed`, then asks `reply(turn, observation)` for
each reply and steps with it until the episode ends or `max_turns` replies were sent; it returns the transcript
(`Played`), the outcome by the one rule (`envs.outcome.episode_outcome`). `reset` and `step` are the caller's:
they raise on a failed call (the gates' `_GateFail`, the audit's `_Fault`), so failures never pass here silently.
`pace` (seconds before each reply) lets a checker send its replies at the times the agent sent its own.

Replies:
  * `bare_replies(kind, generic, policy)`: the gates' policies ("generic" random replies from the observation,
    "noop" an empty answer, "repeat" one random reply again and again), each answer bare in the kind's format;
  * `AgentShaped(texts, kind, generic, answer)`: the agent's own reply of the same turn (its prose, its capitals,
    its format) with its final answer replaced: by a random one (`answer="random"`), an empty one ("noop") or a
    given string, in the format the trainer uses for the kind the run assigned (never one the environment
    claims). An environment cannot tell these from the agent by how they are written.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spade_jax.envs.outcome import episode_outcome
from spade_jax.gates.probes import GenericPolicy, answer_action, noop_action

__all__ = ["AgentShaped", "Played", "bare_replies", "canon", "first_difference", "play", "replace_answer"]

Reply = Callable[[int, str], str]
_TOOL_CALL_RE = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.S)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)


@dataclass
class Played:
    """One episode as played: the replies sent, the transcript (reset's observation, then per step
    (observation, reward, terminated, truncated)), how many steps, the return and win, and whether it ended."""

    actions: list[str] = field(default_factory=list)
    transcript: list = field(default_factory=list)
    steps: int = 0
    ret: float = 0.0
    won: bool = False
    ended: bool = False


def play(
    reset: Callable[[int], tuple[str, dict]],
    step: Callable[[str], tuple],
    seed: int,
    reply: Reply,
    max_turns: int,
    *,
    pace: Sequence[float] = (),
    with_info: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> Played:
    """One episode (see the module docstring); `pace[i]` seconds pass before reply i (the last one repeats).
    The transcript holds ("reset", observation) and per step (observation, reward, terminated, truncated), each
    with its info (as canonical JSON text) when `with_info`."""
    out = Played()
    obs, info = reset(seed)
    out.transcript.append(("reset", obs, canon(info)) if with_info else ("reset", obs))
    for turn in range(max_turns):
        action = reply(turn, obs)
        if pace:
            sleep(max(0.0, float(pace[min(turn, len(pace) - 1)])))
        obs, reward, terminated, truncated, info = step(action)
        out.actions.append(action)
        record = (obs, reward, bool(terminated), bool(truncated))
        out.transcript.append((*record, canon(info)) if with_info else record)
        out.ret += reward
        if terminated or truncated:
            out.won = episode_outcome([reward], bool(terminated))[1]
            out.ended = True
            break
    out.steps = len(out.actions)
    return out


def bare_replies(kind: str, generic: GenericPolicy, policy: str) -> Reply:
    """The gates' bare replies: "generic" (random, from the observation), "noop" (an empty answer) or "repeat"
    (one random reply, every turn)."""
    fixed: list[str] = []

    def reply(turn: int, obs: str) -> str:
        generic.observe(obs)
        if policy == "noop":
            return noop_action(kind)
        if policy == "repeat":
            fixed[:] = fixed or [generic.act()]
            return fixed[0]
        return generic.act()

    return reply


def replace_answer(text: str, kind: str, answer: str | None) -> str:
    """`text` (an agent's reply) with its final answer replaced by `answer`, in the kind's format: the content of
    its last `\\boxed{...}` (games, reasoning) or its `<answer>...</answer>` (tools; a reply that makes tool calls
    gets `answer` verbatim in their place: a random tool call or answer); where it has none, `answer` is added
    after its prose. `answer` None keeps the text as it is."""
    if answer is None:
        return text
    if kind == "tool":
        found = list(_ANSWER_RE.finditer(text))
        if found:
            m = found[-1]
            return text[: m.start(1)] + answer + text[m.end(1) :]
        calls = list(_TOOL_CALL_RE.finditer(text))
        if calls and (answer.startswith("<tool_call>") or answer.startswith("<answer>")):
            return text[: calls[0].start()] + answer + text[calls[-1].end() :]
        return text.rstrip() + "\n\n" + (answer if answer.startswith("<") else answer_action(kind, answer))
    start = text.rfind("\\boxed{")
    if start >= 0:
        depth, i = 1, start + len("\\boxed{")
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[:i] + answer + text[j:]
        return text[:i] + answer + "}"
    return text.rstrip() + "\n\n" + answer_action(kind, answer)


class AgentShaped:
    """Replies shaped like the agent's: turn t is the agent's reply of turn t (its last one after that) with the
    final answer replaced (see `replace_answer`); `answer` is "random" (a random answer drawn by `generic` from
    the current observation: a tool call or an answer for tool environments), "noop" (empty) or a fixed str."""

    def __init__(self, texts: Sequence[str], kind: str, generic: GenericPolicy, answer: str = "random"):
        self.texts = [t for t in texts if isinstance(t, str)] or [""]
        self.kind, self.generic, self.answer = kind, generic, answer

    def __call__(self, turn: int, obs: str) -> str:
        text = self.texts[min(turn, len(self.texts) - 1)]
        self.generic.observe(obs)
        if self.answer == "noop":
            return replace_answer(text, self.kind, "")
        if self.answer != "random":
            return replace_answer(text, self.kind, self.answer)
        if self.kind == "tool":
            act = self.generic.act()  # a tool call or an <answer>
            found = _ANSWER_RE.search(act)
            return replace_answer(text, "tool", found.group(1) if found and _ANSWER_RE.search(text) else act)
        return replace_answer(text, self.kind, self.generic.token())


def first_difference(a: Sequence, b: Sequence) -> str:
    """Where two transcripts of `play` first differ, in words ("step 2 differs in obs, reward")."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            where = "reset()" if i == 0 else f"step {i}"
            fields = ("", "obs", "info") if i == 0 else ("obs", "reward", "terminated", "truncated", "info")
            what = [f for f, u, v in zip(fields, x, y) if u != v and f]
            return f"{where} differs in {', '.join(what) or 'shape'}"
    return f"transcripts have different lengths ({len(a)} vs {len(b)})"


def canon(value: Any) -> str:
    """A JSON text of a value for comparing transcripts (repr where JSON cannot say it)."""
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(value)
