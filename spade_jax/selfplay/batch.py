"""The self-play output for the learner: designer samples and agent samples, plain python/numpy, grouped.

Every sample is (prompt ids, completion ids, completion mask, sampler log-probs per completion token, reward,
group id, role). The mask is 1 exactly on tokens the policy generated; agent completions interleave the
environment's observations (mask 0). Groups are what advantages are centred within: the K plays of one
environment in one condition at one step for the agent, the designs of one (kind, skill) in one design round
for the designer (as in the reference, which centres designer rewards per skill over the round).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ROLES", "SelfPlayBatch", "SelfPlaySample"]

ROLES = ("agent", "designer")  # index = role id used by spade_jax.rl (0 agent, 1 designer)


@dataclass
class SelfPlaySample:
    """One trajectory of one role."""

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    logprobs: list[float]
    reward: float
    group_id: str
    raw_logprobs: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        n = len(self.completion_ids)
        if len(self.completion_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"{self.role} sample: {n} completion tokens but {len(self.completion_mask)} mask entries and "
                f"{len(self.logprobs)} log-probs"
            )

    @property
    def role_id(self) -> int:
        return ROLES.index(self.role)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


@dataclass
class SelfPlayBatch:
    """Samples of both roles for one learner step, plus measurements and counters for logging."""

    samples: list[SelfPlaySample] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    envs: list[dict[str, Any]] = field(default_factory=list)
    designer_scale: float = 1.0  # factor on the designer's centred rewards (the reference's env_reward_scale)

    def by_role(self, role: str) -> list[SelfPlaySample]:
        return [s for s in self.samples if s.role == role]

    def extend(self, other: SelfPlayBatch) -> SelfPlayBatch:
        """Appends another batch (samples, env rows; stats are merged, later values win)."""
        self.samples += other.samples
        self.envs += other.envs
        self.stats.update(other.stats)
        return self

    def __len__(self) -> int:
        return len(self.samples)
