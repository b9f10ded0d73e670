"""The self-play output for the learner: what one step made, built once (`SelfPlay.measure`) and returned whole.

Every sample is one `spade_jax.trajectory.Sample` (prompt ids, completion ids, completion mask, sampler log-probs
per completion token, reward, group id, role), the record the learner packs. The mask is 1 exactly on tokens the
policy generated; agent completions interleave the environment's observations (mask 0). Groups are what advantages
are centred within: the plays of one environment in one condition at one step for the agent, the designs of one
(kind, skill) in one design round for the designer (as in the reference, which centres designer rewards per skill
over the round). A thinking agent whose turns are re-rendered (`rollout.thinking_turns="rerender"`) gives one
sample per turn, all carrying the episode's reward and its key in `turn_of`.

Which samples the learner then trains on, in what order and with what weight, is the learner half's business
(run/learn.py: the global batch of `loop.batch_policy`, the loss aggregation of `learner.loss_agg`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spade_jax.selfplay.episodes import HINT, EndReason, Episode
from spade_jax.selfplay.window import DesignSample, Round, RoundScore
from spade_jax.trajectory import AGENT, DESIGNER, Sample, role_id

__all__ = ["SelfPlayBatch", "agent_samples", "designer_samples"]


@dataclass(frozen=True)
class SelfPlayBatch:
    """The samples of both roles of one step, plus its measurements, counters and the environments scored.

    `designer` holds the designer samples released this step (rounds closing); `designer_masked` counts those
    left out because their reward was negative (the reference's signal drops them); `designs_made` counts the
    designs generated this step (the reference's batch floor reads it)."""

    agent: tuple[Sample, ...] = ()
    designer: tuple[Sample, ...] = ()
    designs_made: int = 0
    designer_masked: int = 0
    envs: tuple[dict[str, Any], ...] = ()
    stats: Mapping[str, float] = field(default_factory=dict)
    # One play of each environment in each condition (hinted, unhinted) as the agent saw and wrote it: env_id,
    # condition, return, won, turns, end, prompt_ids, completion_ids; the report shows them (run/transcripts.py).
    examples: tuple[dict[str, Any], ...] = ()

    @property
    def samples(self) -> list[Sample]:
        """Every sample, the designer's first (the reference's order)."""
        return [*self.designer, *self.agent]

    def by_role(self, role: int | str) -> list[Sample]:
        """The samples of one role (AGENT / DESIGNER, or their names)."""
        rid = role_id(role) if isinstance(role, str) else role
        return list(self.designer if rid == DESIGNER else self.agent if rid == AGENT else ())

    def __len__(self) -> int:
        return len(self.agent) + len(self.designer)


def agent_samples(
    episodes: Iterable[Episode],
    step: int,
    *,
    exclude: set[str] = frozenset(),
    train_hinted: bool = False,
    compact_filter: bool = False,
) -> list[Sample]:
    """The agent role's samples, in play order: every kept, finished play, never one ended by its environment's
    fault (a hang, a reward out of range) nor any play of the step of an environment in `exclude` (one that broke
    its contract). Hinted plays only with `train_hinted`. With `compact_filter` (the reference's tool recipe) a
    play that did not end by termination stays in the batch with a zero loss mask. A play with per-turn prompts
    (`Episode.turn_prompts`) gives one sample per turn, each with the episode's reward."""
    out = []
    for ep in episodes:
        end = EndReason(ep.end_reason)
        if ep.discarded or ep.env_id in exclude or end.envs_fault:
            continue
        if ep.condition == HINT and not train_hinted:
            continue
        if not ep.completion_ids or not ep.prompt_ids:
            continue
        zero = compact_filter and not end.terminal
        group = f"agent/{step}/{ep.env_id}/{ep.condition}"
        meta = {"env_id": ep.env_id, "condition": str(ep.condition), "turns": ep.turns, "end": str(ep.end_reason),
                "won": ep.won, "seed": ep.spec.seed}  # fmt: skip
        if ep.turn_prompts:
            key = f"{group}/{ep.spec.seed}/{len(out)}"
            for i, (a, b) in enumerate(ep.turn_spans):
                mask = [0] * (b - a) if zero else list(ep.completion_mask[a:b])
                out.append(Sample(ep.turn_prompts[i], ep.completion_ids[a:b], mask, ep.logprobs[a:b], role=AGENT,
                                  reward=ep.episode_return, group_id=group, raw_logprobs=ep.raw_logprobs[a:b],
                                  turn_of=key, meta={**meta, "turn": i}))  # fmt: skip
            continue
        mask = [0] * len(ep.completion_mask) if zero else ep.completion_mask
        out.append(Sample(ep.prompt_ids, ep.completion_ids, mask, ep.logprobs, role=AGENT, reward=ep.episode_return,
                          group_id=group, raw_logprobs=ep.raw_logprobs, meta=meta))  # fmt: skip
    return out


def designer_samples(rnd: Round, scores: Mapping[str, RoundScore], step: int, *,
                     drop_negative: bool = False) -> tuple[list[Sample], int]:  # fmt: skip
    """A closing round's designer samples with their rewards (a design whose environment was not scored: 0),
    grouped per round and (kind, skill); with `drop_negative` (the reference's blend) a design whose reward is
    below 0 is left out. Returns (samples, how many were left out)."""
    out, masked = [], 0
    for d in rnd.samples:
        reward = scores[d.record_id].reward if (d.valid and d.record_id in scores) else 0.0
        if drop_negative and reward < 0:
            masked += 1
            continue
        out.append(_design_sample(d, reward, rnd.start, step))
    return out, masked


def _design_sample(d: DesignSample, reward: float, start: int, step: int) -> Sample:
    return Sample(
        d.prompt_ids, d.completion_ids, [1] * len(d.completion_ids), d.logprobs, role=DESIGNER, reward=reward,
        group_id=f"designer/{start}/{d.kind}/{d.skill}", raw_logprobs=d.raw_logprobs,
        meta={"record_id": d.record_id, "attempt": d.attempt, "gate": d.gate, "valid": d.valid, "kind": d.kind,
              "skill": d.skill, "round": start, "delayed_by": step - start},
    )  # fmt: skip
