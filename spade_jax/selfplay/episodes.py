"""The records of a rollout: what to play (`EpisodeSpec`), how one episode went (`Episode`), and a batch of
them with its timings (`RolloutResult`, which also joins the results of the hosts of a multi-host job). Plain
data, picklable (infra/hosts.py sends them between processes); the engine that makes them is rollouts.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["HINT", "NO_HINT", "Condition", "EndReason", "Episode", "EpisodeSpec", "RolloutResult"]


class Condition(StrEnum):
    """Whether the agent is shown the environment's hint in an episode."""

    HINT = "hint"
    NO_HINT = "no_hint"


HINT, NO_HINT = Condition.HINT, Condition.NO_HINT


class EndReason(StrEnum):
    """How an episode ended. Only TERMINATED (the environment ended it) and STEP_ERROR (its step() raised:
    the reference's -1, terminated; `rollout.step_error="terminal_penalty"`) count a terminal reward; every
    other reason returns 0. TIMEOUT and VIOLATION are the environment's fault (never trained, the design is
    charged under the strict signal); DISCARDED episodes are never measured nor trained."""

    UNFINISHED = ""
    TERMINATED = "terminated"  # the environment said so
    TRUNCATED = "truncated"  # the environment's own truncation flag
    MAX_TURNS = "max_turns"  # rollout.max_turns replies without either flag
    CONTEXT = "context"  # no room left in the episode's token budget
    LENGTH = "length"  # a reply hit its token limit without an end token (rollout.no_eos="end")
    FORMAT = "format"  # rollout.max_consecutive_format_errors replies in the wrong format
    STEP_ERROR = "step_error"  # step() raised or returned garbage (rollout.step_error="terminal_penalty")
    TIMEOUT = "timeout"  # step() hung
    VIOLATION = "violation"  # a reward outside [-1, 1]
    DISCARDED = "discarded"  # a failure that measures nothing (load, reset, sandbox, missing hint)

    @property
    def terminal(self) -> bool:
        """True when the episode's last reward counts as its return."""
        return self in (EndReason.TERMINATED, EndReason.STEP_ERROR)

    @property
    def envs_fault(self) -> bool:
        """True when the environment, not the agent, ended the episode badly (never trained)."""
        return self in (EndReason.TIMEOUT, EndReason.VIOLATION)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: which environment, which reset seed, and whether the agent gets the hint.

    `hint` is a fixed hint (e.g. written by the model); with `env_hint` the engine asks the environment's own
    `hint()` after reset (falling back to `hint` when that fails or is empty). A hinted spec left without any
    hint is discarded with `error="hint_failed"`.
    """

    env_id: str
    source: str
    seed: int
    condition: Condition = NO_HINT
    hint: str | None = None
    env_hint: bool = False
    kind: str = "game"


@dataclass
class Episode:
    """A finished episode. `completion_*` cover everything after the first prompt (agent turns and the
    observations in between); `completion_mask` is 1 exactly on the agent's own tokens.

    `tools` are the tool schemas the chat template rendered (`tools=`) for a tool episode played in the
    template's own tool format (tool results are then `role: "tool"` messages); None when the tools were the
    environment's textual list (or the episode is no tool episode).
    `rewards` are the step rewards (logging only); `episode_return` / `won` follow `episode_outcome`.
    `terminated` is True only when the environment ended the episode. Hint fields (hinted episodes only):
    `hint` is the text the agent saw; `hint_source` "env" or "spec"; `hint_failed` True when there was no
    usable hint (the episode is then discarded, `error="hint_failed"`); `hint_leaked` True when the sandbox
    found the answer in the hint; `leak_check` "" (not run), "clean", "leaked" or "failed" (unknown, treated
    as not leaked). `violation` is '' or how the environment broke its contract during the episode (a reward
    out of range); the episode then ends with `end_reason="violation"`.
    `reset_obs` and `trace` are what the environment saw and said, for the audit that replays the play
    (gates/audit.py): reset's observation, then per step (action sent, observation, reward, terminated,
    truncated, seconds between the previous answer and this call).
    """

    spec: EpisodeSpec
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turn_prompts: list[list[int]] = field(default_factory=list)  # per-turn prompts (thinking_turns="rerender")
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] | None = None
    rewards: list[float] = field(default_factory=list)
    episode_return: float = 0.0
    won: bool = False
    terminated: bool = False
    end_reason: EndReason = EndReason.UNFINISHED
    discarded: bool = False
    error: str | None = None
    format_errors: int = 0
    hint: str | None = None
    hint_source: str = ""
    hint_failed: bool = False
    hint_leaked: bool = False
    leak_check: str = ""
    violation: str = ""
    reset_obs: str = ""
    trace: list[tuple] = field(default_factory=list)

    @property
    def condition(self) -> Condition:
        return self.spec.condition

    @property
    def env_id(self) -> str:
        return self.spec.env_id

    @property
    def turns(self) -> int:
        return len(self.turn_spans)

    @property
    def agent_tokens(self) -> int:
        return int(sum(self.completion_mask))


@dataclass
class RolloutResult:
    """All episodes (discarded ones included, flagged) plus timing and failure counts."""

    episodes: list[Episode]
    wall_s: float = 0.0
    policy_s: float = 0.0
    pool_s: float = 0.0
    turns: int = 0
    failures: Counter = field(default_factory=Counter)
    by_host: list[tuple[int, float]] = field(default_factory=list)  # (episodes, wall_s) per host, when several

    @classmethod
    def merge(cls, parts: Sequence[RolloutResult]) -> RolloutResult:
        """The hosts' results of one divided rollout as one, episodes in host order (the order of the specs):
        the wall time is the slowest host's, the policy and pool times the hosts' mean."""
        n = max(len(parts), 1)
        return cls(
            episodes=[e for p in parts for e in p.episodes],
            wall_s=max((p.wall_s for p in parts), default=0.0),
            policy_s=sum(p.policy_s for p in parts) / n,
            pool_s=sum(p.pool_s for p in parts) / n,
            turns=sum(p.turns for p in parts),
            failures=sum((p.failures for p in parts), Counter()),
            by_host=[(len(p.episodes), p.wall_s) for p in parts],
        )

    @property
    def kept(self) -> list[Episode]:
        return [e for e in self.episodes if not e.discarded]

    def stats(self) -> dict[str, float]:
        """Summary for logging."""
        kept = self.kept
        out = {
            "episodes": float(len(self.episodes)),
            "discarded": float(len(self.episodes) - len(kept)),
            "wall_s": self.wall_s,
            "policy_share": self.policy_s / self.wall_s if self.wall_s else 0.0,
            "pool_share": self.pool_s / self.wall_s if self.wall_s else 0.0,
            "episodes_per_s": len(self.episodes) / self.wall_s if self.wall_s else 0.0,
        }
        for cond in (HINT, NO_HINT):
            eps = [e for e in kept if e.condition == cond]
            if eps:
                out[f"return_{cond}"] = sum(e.episode_return for e in eps) / len(eps)
                out[f"win_rate_{cond}"] = sum(e.won for e in eps) / len(eps)
        if kept:
            out["turns_mean"] = sum(e.turns for e in kept) / len(kept)
            out["format_errors_mean"] = sum(e.format_errors for e in kept) / len(kept)
        for reason, n in Counter(e.end_reason for e in self.episodes).items():
            out[f"end_{reason}"] = float(n)
        if len(self.by_host) > 1:  # the load of a divided rollout: the busiest and the idlest host
            eps, wall = [n for n, _ in self.by_host], [w for _, w in self.by_host]
            out.update(host_episodes_max=float(max(eps)), host_episodes_min=float(min(eps)),
                       host_wall_s_max=max(wall), host_wall_s_min=min(wall))  # fmt: skip
        return out

    def hint_stats(self) -> dict[str, float]:
        """Hint counters over the hinted episodes: `hints/failed` (no usable hint: discarded), `hints/leaked`
        (the hint contains the answer), `hints/leak_check_failed` (unknown, counted as not leaked)."""
        hinted = [e for e in self.episodes if e.condition == HINT]
        return {
            "hints/episodes": float(len(hinted)),
            "hints/failed": float(sum(e.hint_failed for e in hinted)),
            "hints/leaked": float(sum(e.hint_leaked for e in hinted)),
            "hints/leak_check_failed": float(sum(e.leak_check == "failed" for e in hinted)),
        }
