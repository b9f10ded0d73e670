"""The one rule for an episode's outcome (return and win), shared by the agent rollouts and the gates.

As in the paper's reference: the return is the TERMINAL step reward, clipped to [-1, 1], and it counts only
when the environment terminated the episode; a truncated episode (by the environment, by the turn limit, by
the context or token budget) returns 0 and is never a win, whatever its step rewards were. A win is a
terminated episode whose final `info["won"]` is a bool saying so, else whose return is >= 0.999.
Standard library only (the gates import it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["WIN_THRESHOLD", "episode_outcome"]

WIN_THRESHOLD = 0.999


def episode_outcome(rewards: Sequence[float], terminated: bool, won: Any = None) -> tuple[float, bool]:
    """(return, won) of an episode from its step rewards, whether it terminated, and the env's `info["won"]`.

    Non-finite or non-numeric terminal rewards count as 0.
    """
    if not terminated or not rewards:
        return 0.0, False
    try:
        last = float(rewards[-1])
    except (TypeError, ValueError):
        last = 0.0
    ret = max(-1.0, min(1.0, last)) if math.isfinite(last) else 0.0
    return ret, (won if isinstance(won, bool) else ret >= WIN_THRESHOLD)
