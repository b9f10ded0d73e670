"""The one rule for an episode's outcome (return and win), and the one definition of what reset() and step() must
return (`reset_problem`, `step_problem`, `reward_problem`), shared by the environment base classes, the sandbox's
reply check, the gates, the audit and the agent rollouts.

As in the paper's reference: the return is the TERMINAL step reward, clipped to [-1, 1], and it counts only
when the environment terminated the episode; a truncated episode (by the environment, by the turn limit, by
the context or token budget) returns 0 and is never a win, whatever its step rewards were. A win is a
terminated episode whose return is >= 0.999: derived from the return, never read from the environment's
`info["won"]`, which a generated environment could set to anything (and so inflate its win rate).

The step contract: reset() returns (observation: str, info: dict); step() returns (observation: str, reward,
terminated: bool, truncated: bool, info: dict) with the reward a real number (not a bool) that is finite and in
[-1, 1]. A reward that is a number but outside the range is the environment breaking its contract (a violation),
which callers may want to tell from a value of the wrong shape (`step_problem(..., reward_range=False)`).
Standard library only (the sandbox side imports it).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

__all__ = ["WIN_THRESHOLD", "episode_outcome", "is_win", "reset_problem", "reward_problem", "step_problem"]

WIN_THRESHOLD = 0.999


def is_win(value: float) -> bool:
    """Whether a return (or a check_answer verdict) counts as a win: >= WIN_THRESHOLD."""
    return value >= WIN_THRESHOLD


def _kind(value: Any) -> str:
    """A short name for what a value is (no repr: a huge int or string stays out of the message)."""
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"int with {len(str(abs(value)))} digits"
    if isinstance(value, bool | int | float) or value is None:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def reward_problem(reward: Any, *, in_range: bool = True) -> str:
    """'' for a step reward the contract allows, else why not: a real number (a bool is not one), finite, and
    (`in_range`) within [-1, 1]."""
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        return f"reward must be a float, got {_kind(reward)}"
    try:
        finite = math.isfinite(float(reward))
    except OverflowError:  # an int beyond the float range, e.g. 10**400
        finite = False
    if not finite:
        return f"reward must be a finite float, got {_kind(reward)} (beyond the float range)"
    if in_range and not -1.0 <= reward <= 1.0:  # ints compare exactly, however large
        return f"reward {str(reward)[:24]} is outside [-1, 1]"
    return ""


def reset_problem(value: Any) -> str:
    """'' when `value` is reset()'s (observation: str, info: dict), else why not."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return f"must return (observation, info), got {_kind(value)}"
    if not isinstance(value[0], str):
        return f"observation must be a str, got {_kind(value[0])}"
    if not isinstance(value[1], dict):
        return f"info must be a dict, got {_kind(value[1])}"
    return ""


def step_problem(value: Any, *, reward_range: bool = True) -> str:
    """'' when `value` is step()'s (observation: str, reward, terminated: bool, truncated: bool, info: dict), the
    reward as `reward_problem` allows it (its range too with `reward_range`), else why not."""
    if not isinstance(value, list | tuple) or len(value) != 5:
        got = len(value) if isinstance(value, list | tuple) else type(value).__name__
        return f"must return a 5-tuple (obs, reward, terminated, truncated, info), got {got}"
    obs, reward, terminated, truncated, info = value
    if not isinstance(obs, str):
        return f"observation must be a str, got {_kind(obs)}"
    problem = reward_problem(reward, in_range=reward_range)
    if problem:
        return problem
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool):
            return f"{name} must be a bool, got {_kind(flag)}"
    if not isinstance(info, dict):
        return f"info must be a dict, got {_kind(info)}"
    return ""


def episode_outcome(rewards: Sequence[Any], terminated: bool) -> tuple[float, bool]:
    """(return, won) of an episode from its step rewards and whether it terminated.

    Terminal rewards that are not finite real numbers (a str, a NaN, an int too large for a float) count as 0.
    """
    if not terminated or not rewards:
        return 0.0, False
    last = rewards[-1]
    try:
        last = float(last) if isinstance(last, numbers.Real) and not isinstance(last, bool) else 0.0
    except OverflowError:  # an int beyond the float range, e.g. 10**400
        last = 0.0
    ret = max(-1.0, min(1.0, last)) if math.isfinite(last) else 0.0
    return ret, is_win(ret)
