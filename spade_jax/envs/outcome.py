"""The one rule for an episode's outcome (return and win), shared by the agent rollouts and the gates.

As in the paper's reference: the return is the TERMINAL step reward, clipped to [-1, 1], and it counts only
when the environment terminated the episode; a truncated episode (by the environment, by the turn limit, by
the context or token budget) returns 0 and is never a win, whatever its step rewards were. A win is a
terminated episode whose return is >= 0.999: derived from the return, never read from the environment's
`info["won"]`, which a generated environment could set to anything (and so inflate its win rate).
Standard library only (the gates import it).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

__all__ = ["WIN_THRESHOLD", "episode_outcome", "is_win"]

WIN_THRESHOLD = 0.999


def is_win(value: float) -> bool:
    """Whether a return (or a check_answer verdict) counts as a win: >= WIN_THRESHOLD."""
    return value >= WIN_THRESHOLD


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
