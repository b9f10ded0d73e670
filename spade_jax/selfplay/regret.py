"""Hint-based regret and the designer's reward (paper blend plus the ablation variants).

regret = mean(hinted returns) - mean(unhinted returns), both measured at the same policy version with matched
play counts. The win rate that places an environment on the difficulty plateau is the agent's UNHINTED one
(the reference computes it from the ordinary, hint-free actor plays). An invalid environment scores 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from spade_jax.config.selfplay import RewardConfig
from spade_jax.envs.outcome import is_win

__all__ = [
    "LearningProgress",
    "RegretStats",
    "designer_reward",
    "measure_regret",
    "plateau",
]


def plateau(win_rate: float, lo: float = 0.4, hi: float = 0.6, ramp: float = 0.25) -> float:
    """1 on [lo, hi], falling linearly to 0 over `ramp` on each side."""
    if win_rate < lo:
        return max(0.0, 1.0 - (lo - win_rate) / ramp)
    if win_rate > hi:
        return max(0.0, 1.0 - (win_rate - hi) / ramp)
    return 1.0


@dataclass(frozen=True)
class RegretStats:
    """Per-environment measurement: means of returns and of wins in each condition, and the regret."""

    n_hint: int
    n_no_hint: int
    return_hint: float
    return_no_hint: float
    win_rate_hint: float
    win_rate_no_hint: float
    regret: float
    measured: bool
    return_window: float = 0.0  # mean unhinted return over the window (the reference's plateau statistic)

    @property
    def win_rate(self) -> float:
        """The win rate used for difficulty (plateau, memory bands): the unhinted one."""
        return self.win_rate_no_hint

    def difficulty(self, stat: str = "win_rate") -> float:
        """What the plateau reads (`reward.plateau_stat`): the unhinted share of wins ("win_rate") or the mean
        unhinted raw return over the window ("mean_return": partial rewards, 0 for truncated plays and the -1 of
        a crashing step counted, as the reference's blend does)."""
        return self.return_window if stat == "mean_return" else self.win_rate_no_hint


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def measure_regret(
    hint_returns: Sequence[float],
    no_hint_returns: Sequence[float],
    hint_wins: Sequence[bool] | None = None,
    no_hint_wins: Sequence[bool] | None = None,
    *,
    expected_plays: int | None = None,
    min_plays_fraction: float = 0.5,
    expected_hint: int | None = None,
) -> RegretStats:
    """Regret from the returns of the (non-discarded) hinted and unhinted episodes of one environment.

    Wins default to `envs.outcome.is_win(return)`. `measured` is False when either condition kept fewer than
    `min_plays_fraction` of its expected episodes (`expected_plays` unhinted, `expected_hint` hinted, default
    the same), or none at all: such an environment has no regret.
    """
    hint_wins = [is_win(r) for r in hint_returns] if hint_wins is None else list(hint_wins)
    no_hint_wins = [is_win(r) for r in no_hint_returns] if no_hint_wins is None else list(no_hint_wins)

    def need(expected: int | None) -> int:
        return 1 if expected is None else max(1, math.ceil(min_plays_fraction * expected))

    expected_hint = expected_plays if expected_hint is None else expected_hint
    measured = len(hint_returns) >= need(expected_hint) and len(no_hint_returns) >= need(expected_plays)
    rh, ru = _mean(hint_returns), _mean(no_hint_returns)
    return RegretStats(
        n_hint=len(hint_returns),
        n_no_hint=len(no_hint_returns),
        return_hint=rh,
        return_no_hint=ru,
        win_rate_hint=_mean([float(w) for w in hint_wins]),
        win_rate_no_hint=_mean([float(w) for w in no_hint_wins]),
        regret=rh - ru if measured else 0.0,
        measured=measured,
    )


@dataclass
class LearningProgress:
    """Per-skill fast/slow moving averages of the agent's win rate (the 'learning progress' ablation).

    The reward of an environment is |its win rate - the skill's slow average|: far from what the agent
    usually achieves in that skill means there is something to learn. State is JSON-able for checkpoints.
    """

    gamma_fast: float = 0.98  # the recipe's --spade-gamma1 / --spade-gamma2
    gamma_slow: float = 0.85
    fast: dict[str, float] = field(default_factory=dict)
    slow: dict[str, float] = field(default_factory=dict)

    def baseline(self, skill: str) -> float:
        """Slow average of the skill's win rate (0 before the first update)."""
        return self.slow.get(skill, 0.0)

    def update(self, skill: str, win_rate: float) -> None:
        """Folds one step's mean win rate of the skill into both averages."""
        if skill not in self.fast:
            self.fast[skill] = self.slow[skill] = float(win_rate)
            return
        self.fast[skill] = (1 - self.gamma_fast) * self.fast[skill] + self.gamma_fast * win_rate
        self.slow[skill] = (1 - self.gamma_slow) * self.slow[skill] + self.gamma_slow * win_rate

    def get_state(self) -> dict:
        return {"fast": dict(self.fast), "slow": dict(self.slow)}

    def set_state(self, state: dict) -> None:
        self.fast, self.slow = dict(state.get("fast", {})), dict(state.get("slow", {}))


def designer_reward(
    stats: RegretStats | None,
    config: RewardConfig = RewardConfig(),
    *,
    valid: bool = True,
    skill: str = "",
    progress: LearningProgress | None = None,
) -> float:
    """Designer reward of one environment under `config.kind`; 0 for invalid or unmeasured environments.

    The difficulty ("win rate" below) is `stats.difficulty(config.plateau_stat)`.
    blend:              w_r * clip(regret / scale, 0, 1) + w_p * plateau(unhinted win rate)   (paper)
    regret:             max(regret, 0)
    solve_band:         plateau(unhinted win rate)
    learning_progress:  |unhinted win rate - slow average of the skill|   (needs `progress`)
    """
    if not valid or stats is None or not stats.measured:
        return 0.0
    wr = stats.difficulty(config.plateau_stat)
    kind = config.kind
    if kind == "blend":
        r = min(1.0, max(0.0, stats.regret / config.regret_scale))
        p = plateau(wr, config.plateau_lo, config.plateau_hi, config.plateau_ramp)
        return config.regret_weight * r + config.plateau_weight * p
    if kind == "regret":
        return max(0.0, stats.regret)
    if kind == "solve_band":
        return plateau(wr, config.plateau_lo, config.plateau_hi, config.plateau_ramp)
    if kind == "learning_progress":
        if progress is None:
            raise ValueError("reward kind 'learning_progress' needs a LearningProgress tracker")
        return abs(wr - progress.baseline(skill))
    raise ValueError(f"unknown designer reward kind {kind!r} (blend, regret, solve_band, learning_progress)")
