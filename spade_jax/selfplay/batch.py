"""The self-play output for the learner: designer samples and agent samples, plain python/numpy, grouped.

Every sample is one `spade_jax.trajectory.Sample` (prompt ids, completion ids, completion mask, sampler log-probs
per completion token, reward, group id, role), the record the learner packs. The mask is 1 exactly on tokens the
policy generated; agent completions interleave the environment's observations (mask 0). Groups are what advantages
are centred within: the K plays of one environment in one condition at one step for the agent, the designs of one
(kind, skill) in one design round for the designer (as in the reference, which centres designer rewards per skill
over the round).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spade_jax.trajectory import Sample, role_id

__all__ = ["SelfPlayBatch"]


@dataclass
class SelfPlayBatch:
    """Samples of both roles for one learner step, plus measurements and counters for logging."""

    samples: list[Sample] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    envs: list[dict[str, Any]] = field(default_factory=list)
    designer_scale: float = 1.0  # factor on the designer's centred rewards (the reference's env_reward_scale)
    # One play of each environment in each condition (hinted, unhinted) as the agent saw and wrote it: env_id,
    # condition, return, won, turns, end, prompt_ids, completion_ids; the report shows them (run/transcripts.py).
    examples: list[dict[str, Any]] = field(default_factory=list)

    def by_role(self, role: str) -> list[Sample]:
        """The samples of one role, by name ("agent", "designer")."""
        rid = role_id(role)
        return [s for s in self.samples if s.role == rid]

    def extend(self, other: SelfPlayBatch) -> SelfPlayBatch:
        """Appends another batch (samples, env rows; stats are merged, later values win)."""
        self.samples += other.samples
        self.envs += other.envs
        self.stats.update(other.stats)
        return self

    def __len__(self) -> int:
        return len(self.samples)
