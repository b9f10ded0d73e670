"""Design rounds: what the designs of one regeneration step earn, measured over the plays of their window.

A round opens when environments are (re)generated at step K. Its hinted plays run once, at step K; its
unhinted plays run at every step its environments are played (`record_plays` adds a step's plays). The round
closes at step K + delay (or at the run's last step, whatever is still open), and then scores every environment
of it once:
- regret at matched timing: mean hinted return minus mean unhinted return, both at step K (same policy
  version). No usable hint (missing, failed or leaking the answer) means no regret: 0;
- the difficulty that places the environment on the plateau, over all unhinted plays of the window: their
  share of wins, or (`reward.plateau_stat="mean_return"`, the reference's) their mean raw return;
- under the strict signal an environment that hung (a step timeout) earns the designer the timeout reward
  instead, one that broke its contract (audit.py, `violations`) the violation reward, and one with too few
  plays nothing; under the reference's signal each earns the blend of whatever plays it has.
The round's designer samples are then released for training with those rewards. All state is plain data
(`to_dict` / `from_dict`) so a checkpoint carries open rounds exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from spade_jax.config.selfplay import RewardConfig
from spade_jax.selfplay.episodes import HINT, NO_HINT, EndReason, RolloutResult
from spade_jax.selfplay.regret import LearningProgress, RegretStats, designer_reward, measure_regret

__all__ = ["DesignSample", "EnvWindow", "HintStatus", "Recorded", "Round", "RoundScore", "record_plays",
           "score_round"]  # fmt: skip


class HintStatus(StrEnum):
    """Whether an environment's hinted arm counts for its regret, or why not."""

    OK = "ok"
    MISSING = "missing"  # no hint, or the hinted plays had none (hint_failed)
    LEAKED = "leaked"  # the hint gives the answer away (the sandbox's leak check)


HINT_OK = HintStatus.OK


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
    hint_status: HintStatus = HINT_OK
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

    def step_plays(self, offset: int) -> list[tuple[float, bool]]:
        return self.plays.get(offset, [])


@dataclass
class RoundScore:
    """The designer-facing measurement of one environment over its window."""

    stats: RegretStats
    reward: float
    hint_status: HintStatus
    timeouts: int
    violation: str = ""


@dataclass
class Round:
    """The environments of one regeneration step, their plays so far, and the designs waiting to be trained.
    `plays` and `hint_plays`: how many unhinted plays per environment and step, and hinted plays per environment,
    its first step played (what "too few plays" is measured against)."""

    start: int
    envs: dict[str, EnvWindow] = field(default_factory=dict)
    samples: list[DesignSample] = field(default_factory=list)
    plays: int = 0
    hint_plays: int = 0

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
            envs[env_id] = EnvWindow(**{**e, "plays": plays, "hint_status": HintStatus(e["hint_status"])})
        samples = [DesignSample(**s) for s in data["samples"]]
        return cls(int(data["start"]), envs, samples, int(data.get("plays", 0)), int(data.get("hint_plays", 0)))


@dataclass(frozen=True)
class Recorded:
    """What a step's plays did to its round: environments that hung, that broke their contract (both retired
    from the rest of the round), and the plays each environment kept this step."""

    hung: frozenset[str]
    broken: frozenset[str]
    played: Mapping[str, int]

    @property
    def retired(self) -> frozenset[str]:
        return self.hung | self.broken


def record_plays(rnd: Round, result: RolloutResult, offset: int, violations: Mapping[str, str] = {},
                 leaked: Iterable[str] = ()) -> Recorded:  # fmt: skip
    """Adds a step's plays (`offset` steps after the round's start) to the round's windows. `violations`: the
    environments the step's audit caught (env id -> why); a play that broke the contract counts too. `leaked`:
    the environments whose hint's candidate answers won at once in the audit. A hung play is never recorded (the
    environment is charged instead); a hinted play that leaked the answer marks the hinted arm unusable."""
    hung, broken, played = set(), set(), Counter()
    for env_id in leaked:
        if env_id in rnd.envs:
            rnd.envs[env_id].hint_status = HintStatus.LEAKED
    for env_id, why in violations.items():
        if env_id in rnd.envs:
            rnd.envs[env_id].violations.append(why)
            broken.add(env_id)
    for ep in result.episodes:
        env = rnd.envs.get(ep.env_id)
        if env is None:
            continue
        if ep.violation:
            env.violations.append(ep.violation)
            broken.add(ep.env_id)
        if ep.end_reason == EndReason.TIMEOUT:
            env.timeouts += 1
            hung.add(ep.env_id)
        if ep.condition == HINT and ep.hint_failed:
            env.hint_status = HintStatus.MISSING
        if ep.discarded or ep.end_reason == EndReason.TIMEOUT:
            continue
        played[ep.env_id] += 1
        if ep.condition == NO_HINT:
            env.add_play(offset, ep.episode_return, ep.won)
        elif ep.hint_leaked:
            env.hint_status = HintStatus.LEAKED
        else:
            env.hint_returns.append(ep.episode_return)
            env.hint_wins.append(ep.won)
    return Recorded(frozenset(hung), frozenset(broken), dict(played))


def window_stats(env: EnvWindow, *, expected_plays: int, min_plays_fraction: float,
                 expected_hint: int | None = None) -> RegretStats:  # fmt: skip
    """Matched-timing regret (0 unless the hint is usable) and the window's unhinted win rate and mean return.
    `expected_plays` / `expected_hint`: the unhinted plays of one step and the hinted plays the environment was
    meant to get; with fewer than `min_plays_fraction` of them it is unmeasured (0: never)."""
    first, window = env.first_plays(), env.window_plays()
    matched = measure_regret(env.hint_returns, [r for r, _ in first], env.hint_wins, [w for _, w in first],
                             expected_plays=expected_plays, expected_hint=expected_hint,
                             min_plays_fraction=min_plays_fraction)  # fmt: skip
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
        return_window=sum(r for r, _ in window) / len(window) if window else 0.0,
    )


def score_round(
    rnd: Round,
    config: RewardConfig,
    progress: LearningProgress,
    *,
    expected_plays: int,
    min_plays_fraction: float,
    strict: bool = True,
) -> dict[str, RoundScore]:
    """Scores every environment of a closing round. The learning-progress trackers are updated with the
    window's difficulty first (per skill), then read, as the reference does. `strict`: our signal (hangs and
    broken contracts charged, too few plays scored 0); else the reference's (the blend of whatever plays there
    are). `expected_plays` is used for a round that does not record its own play counts."""
    frac = min_plays_fraction if strict else 0.0
    stats = {
        env_id: window_stats(env, expected_plays=rnd.plays or expected_plays, min_plays_fraction=frac,
                             expected_hint=rnd.hint_plays or expected_plays)
        for env_id, env in rnd.envs.items()
    }  # fmt: skip
    by_skill: dict[str, list[float]] = {}
    for env_id, env in rnd.envs.items():
        if stats[env_id].measured and not (strict and env.violations):
            by_skill.setdefault(env.skill, []).append(stats[env_id].difficulty(config.plateau_stat))
    for skill, rates in by_skill.items():
        progress.update(skill, sum(rates) / len(rates))
    out = {}
    for env_id, env in rnd.envs.items():
        st = stats[env_id]
        if strict and env.violations:
            reward = config.violation_reward
        elif strict and env.timeouts:
            reward = config.timeout_reward
        else:
            reward = designer_reward(st, config, skill=env.skill, progress=progress)
        out[env_id] = RoundScore(st, reward, env.hint_status, env.timeouts, env.violations[0] if env.violations else "")
    return out
