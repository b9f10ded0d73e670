"""The one trajectory record, from rollout to learner: what self-play emits and `rl.batch.pack_sequences` packs.

Plain python (no JAX): a prompt, a completion that may interleave environment observations, the sampler's
log-probs, and what the learner needs to weigh it (role and group as plain ids, the reward the advantage is
computed from, then the advantage itself); what the cycle knows about it besides (environment, seed, verdict,
round) rides in `meta` for logging and tests. Roles are ids; their names are defined here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AGENT", "DESIGNER", "ROLE_NAMES", "Sample", "role_id"]

AGENT, DESIGNER = 0, 1
ROLE_NAMES = {AGENT: "agent", DESIGNER: "designer"}


def role_id(name: str) -> int:
    """The id of a role name ("agent", "designer"); ValueError naming the known ones otherwise."""
    for rid, known in ROLE_NAMES.items():
        if known == name:
            return rid
    raise ValueError(f"role must be one of {tuple(ROLE_NAMES.values())}, got {name!r}")


@dataclass
class Sample:
    """One trajectory as python lists.

    completion_mask: 1 on tokens the policy produced (trained), 0 on observation tokens inserted by the
    environment between turns; None means all ones. logprobs: the sampler's log-prob of each completion
    token (any value where the mask is 0); None means unknown (NaN in the batch): those tokens get importance
    weight 1, i.e. the sampler is assumed to be the learner. raw_logprobs: the same under the raw model (no
    temperature or top-p), what the importance weight uses when known. advantage: scalar, or one per completion
    token (set from `reward` within `group_id` before training). role: AGENT or DESIGNER. turn_of: the key of
    the episode a per-turn sample belongs to (a thinking agent's re-rendered turns): the turns of one episode
    count once in the global batch and share one token mean (the reference's slime groups). loss_weight: the
    weight of each of its trained tokens in the loss (None: one token mean over the whole batch).
    """

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    completion_mask: Sequence[int] | None = None
    logprobs: Sequence[float] | None = None
    advantage: float | Sequence[float] = 0.0
    role: int = AGENT
    reward: float = 0.0
    group_id: str = ""
    raw_logprobs: Sequence[float] | None = None
    loss_weight: float | None = None
    turn_of: str = ""  # the episode this sample is one turn of ("": the sample is its own episode or design)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role not in ROLE_NAMES:
            raise ValueError(f"role must be one of {tuple(ROLE_NAMES)} ({', '.join(ROLE_NAMES.values())}), "
                             f"got {self.role!r}")  # fmt: skip

    @classmethod
    def coerce(cls, s: Sample | Mapping[str, Any]) -> Sample:
        if isinstance(s, Sample):
            return s
        if isinstance(s, Mapping):
            unknown = set(s) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"unknown sample keys {sorted(unknown)}; expected {sorted(cls.__dataclass_fields__)}")
            return cls(**s)
        raise TypeError(f"sample must be a Sample or a mapping, got {type(s).__name__}")

    @property
    def role_name(self) -> str:
        return ROLE_NAMES[self.role]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)
