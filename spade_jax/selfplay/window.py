"""Design rounds: what the designs of one regeneration step earn, measured over the plays of their window.

A round opens when environments are (re)generated at step K. Its hinted plays run once, at step K; its
unhinted plays run at every step its environments are played. The round closes at step K + delay (or at the
run's last step, whatever is still open), and then scores every environment of it once:
- regret at matched timing: mean hinted return minus mean unhinted return, both at step K (same policy
  version, same reset seeds). No usable hint (missing, failed or leaking the answer) means no regret: 0;
- the win rate that places the environment on the difficulty plateau: all unhinted plays of the window;
- an environment that hung (a step timeout) earns the designer the timeout reward instead, and one that broke
  its contract on the training seeds (audit.py: `violations`) the violation reward.
The round's designer samples are then released for training with those rewards. All state is plain data
(`to_dict` / `from_dict`) so a checkpoint carries open rounds exactly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from spade_jax.config.selfplay import RewardConfig
from spade_jax.selfplay.regret import LearningProgress, RegretStats, designer_reward, measure_regret

__all__ = ["DesignSample", "EnvWindow", "Round", "RoundScore", "score_round"]

HINT_OK = "ok"


@dataclass
class DesignSample:
    """One trainable designer generation (the designer role's trajectory) and the environment it made."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    raw_logprobs: list[float]
    record_id: str
    kind: str
    skill: str
    valid: bool
    attempt: int = 0
    gate: str = ""


@dataclass
class EnvWindow:
    """The plays of one environment over its round: hinted ones at the round's first step, unhinted ones
    per step offset. `hint_status` is "ok" or why the hinted arm does not count ("missing", "leaked")."""

    env_id: str
    kind: str
    skill: str
    hint_status: str = HINT_OK
    hint_returns: list[float] = field(default_factory=list)
    hint_wins: list[bool] = field(default_factory=list)
    plays: dict[int, list[tuple[float, bool]]] = field(default_factory=dict)
    timeouts: int = 0
    violations: list[str] = field(default_factory=list)

    def add_play(self, offset: int, episode_return: float, won: bool) -> None:
        self.plays.setdefault(offset, []).append((float(episode_return), bool(won)))

    def first_plays(self) -> list[tuple[float, bool]]:
        """The unhinted plays of the first step played (the hinted arm's matched counterpart)."""
        return self.plays[min(self.plays)] if self.plays else []

    def window_plays(self) -> list[tuple[float, bool]]:
        return [p for offset in sorted(self.plays) for p in self.plays[offset]]


@dataclass
class RoundScore:
    """The designer-facing measurement of one environment over its window."""

    stats: RegretStats
    reward: float
    hint_status: str
    timeouts: int
    violation: str = ""


@dataclass
class Round:
    """The environments of one regeneration step, their plays so far, and the designs waiting to be trained."""

    start: int
    envs: dict[str, EnvWindow] = field(default_factory=dict)
    samples: list[DesignSample] = field(default_factory=list)

    def due(self, step: int, delay: int) -> bool:
        return step >= self.start + delay

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for env in out["envs"].values():  # JSON object keys are strings
            env["plays"] = {str(k): [list(p) for p in v] for k, v in env["plays"].items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Round:
        envs = {}
        for env_id, e in data["envs"].items():
            plays = {int(k): [(float(r), bool(w)) for r, w in v] for k, v in e["plays"].items()}
            envs[env_id] = EnvWindow(**{**e, "plays": plays})
        return cls(int(data["start"]), envs, [DesignSample(**s) for s in data["samples"]])


def window_stats(env: EnvWindow, *, expected_plays: int, min_plays_fraction: float) -> RegretStats:
    """Matched-timing regret (0 unless the hint is usable) and the window's unhinted win rate."""
    first, window = env.first_plays(), env.window_plays()
    matched = measure_regret(env.hint_returns, [r for r, _ in first], env.hint_wins, [w for _, w in first],
                             expected_plays=expected_plays, min_plays_fraction=min_plays_fraction)  # fmt: skip
    measured = len(window) >= max(1, math.ceil(min_plays_fraction * expected_plays))
    regret = matched.regret if (env.hint_status == HINT_OK and matched.measured) else 0.0
    wins = [w for _, w in window]
    return RegretStats(
        n_hint=matched.n_hint,
        n_no_hint=len(window),
        return_hint=matched.return_hint,
        return_no_hint=matched.return_no_hint,
        win_rate_hint=matched.win_rate_hint,
        win_rate_no_hint=sum(wins) / len(wins) if wins else 0.0,
        regret=regret,
        measured=measured,
    )


def score_round(
    rnd: Round,
    config: RewardConfig,
    progress: LearningProgress,
    *,
    expected_plays: int,
    min_plays_fraction: float,
) -> dict[str, RoundScore]:
    """Scores every environment of a closing round. The learning-progress trackers are updated with the
    window's win rates first (per skill), then read, as the reference does."""
    stats = {
        env_id: window_stats(env, expected_plays=expected_plays, min_plays_fraction=min_plays_fraction)
        for env_id, env in rnd.envs.items()
    }
    by_skill: dict[str, list[float]] = {}
    for env_id, env in rnd.envs.items():
        if stats[env_id].measured and not env.violations:
            by_skill.setdefault(env.skill, []).append(stats[env_id].win_rate)
    for skill, rates in by_skill.items():
        progress.update(skill, sum(rates) / len(rates))
    out = {}
    for env_id, env in rnd.envs.items():
        st = stats[env_id]
        if env.violations:
            reward = config.violation_reward
        elif env.timeouts:
            reward = config.timeout_reward
        else:
            reward = designer_reward(st, config, skill=env.skill, progress=progress)
        out[env_id] = RoundScore(st, reward, env.hint_status, env.timeouts, env.violations[0] if env.violations else "")
    return out
