"""The learner half of a step: a self-play batch -> advantages -> the update's samples and weights -> one step.

`BatchRule` is everything this reads from the run config. In order:
1. the designer's reward scale: fixed, or the reference's automatic one (agent samples per designer sample times
   the regeneration interval, at most `designer_reward_scale_max`);
2. advantages over every sample of the step, before any is cut or duplicated (as the reference computes them):
   the agent's z-scored per group, the designer's centred per skill and round and scaled (rl/advantages.py). The
   turns of one episode (a thinking agent's per-turn samples) count once, with the episode's reward;
3. which samples, in which order (`loop.batch_policy`): "all" = every sample; "reference" = a fixed global batch
   of G (`loop.global_batch`) episodes and designs: designer samples first, then the agent's in play order; when
   the agent has fewer than G minus the designs made this step, its samples are repeated round-robin from the
   first (real duplicates, trained); when the batch is still short of G, the rest are the reference's inert pads
   (loss mask 0: counted in G, nothing to compute) and, with no KL or entropy term, the real samples' advantages
   are multiplied by G / real (the reference's stand-in for a dynamic batch size); the tail beyond G is cut (the
   last environments' plays at a designer step, which still counted in their group's z-score);
4. loss weights (`learner.loss_agg`): "token_mean" = one mean over the trained tokens of the batch;
   "sample_mean_fixed" = a token of a sample weighs 1 / (the sample's trained tokens x G), an episode's turns
   sharing their episode's token count: every sample counts 1/G whatever its length (the reference's slime).
Samples whose advantage is 0 carry no policy gradient and are left out of the computation (counted), unless a
KL or entropy term needs them under "sample_mean_fixed" (G stays fixed either way); so are samples with no trained
token (the compact filter's) and samples longer than every length bucket (counted). At learning rate 0 (the
learning benchmark's control) the step is counted but not computed (`train/frozen`). With
`selfplay.train_agent=false` the agent's samples are left out before anything else (`train/agent_not_trained`
counts them): only the designer learns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spade_jax.config.run import RunConfig
from spade_jax.rl.advantages import group_advantages, group_stats
from spade_jax.rl.batch import Sample, pack_sequences, split_trainable
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.trajectory import AGENT, DESIGNER, ROLE_NAMES

if TYPE_CHECKING:
    from spade_jax.rl.learner import Learner

__all__ = ["BatchRule", "band_stats", "designer_scale", "to_train_samples", "train_on", "trained_roles"]


@dataclass(frozen=True)
class BatchRule:
    """What turns a self-play batch into the learner's samples (see the module doc); `of(cfg)` reads a run's."""

    policy: str = "all"
    global_batch: int = 192
    loss_agg: str = "token_mean"
    role_norm: str = "std"
    agent_group_std: bool = True
    designer_scale: float = 0.0  # 0: automatic
    designer_scale_max: float = 50.0
    regen_interval: int = 4
    extra_terms: bool = False  # a KL or entropy term: zero-advantage samples still have a gradient
    train_agent: bool = True  # False: the agent's samples are left out (the designer alone learns)

    @classmethod
    def of(cls, cfg: RunConfig) -> BatchRule:
        sp, lc = cfg.selfplay, cfg.learner
        return cls(cfg.loop.batch_policy, cfg.loop.global_batch, lc.loss_agg, cfg.loop.role_norm,
                   cfg.loop.agent_group_std, sp.designer_reward_scale, sp.designer_reward_scale_max,
                   sp.regen_interval, lc.kl_coef != 0 or lc.entropy_coef != 0, sp.train_agent)  # fmt: skip


def designer_scale(n_agent: int, n_designer: int, rule: BatchRule) -> float:
    """The factor on centred designer rewards: fixed, or the reference's automatic one (compute_env_reward_scale:
    agent samples / designer samples x the regeneration interval, capped); 1 when either count is 0."""
    if rule.designer_scale > 0:
        return rule.designer_scale
    if n_agent <= 0 or n_designer <= 0:
        return 1.0
    return min(n_agent / n_designer * rule.regen_interval, rule.designer_scale_max)


def _units(samples: Sequence[Sample]) -> list[list[Sample]]:
    """Samples grouped into what counts once in the batch: an episode's consecutive turns, else each sample."""
    out: list[list[Sample]] = []
    for s in samples:
        if out and s.turn_of and out[-1][0].turn_of == s.turn_of:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def _reference_batch(designer: list, agent: list, g: int, designs_made: int) -> tuple[list, dict[str, float]]:
    """The reference's global batch of units (spade_rollout.py): designer first, agent duplicated up to
    G - designs_made, padded to G (pads counted, not made), cut to G."""
    floor = g - designs_made
    dup = max(0, floor - len(agent)) if agent else 0
    agent = agent + [agent[i % len(agent)] for i in range(dup)]
    units = designer + agent
    counts = {"train/batch_duplicates": float(dup), "train/batch_cut": float(max(0, len(units) - g)),
              "train/batch_pads": float(max(0, g - len(units)))}  # fmt: skip
    return units[:g], counts


def to_train_samples(batch: SelfPlayBatch, rule: BatchRule = BatchRule()) -> tuple[list[Sample], dict[str, float]]:
    """The learner's samples of a step, with advantages and loss weights (see the module doc), and their counts."""
    designer, agent = _units(batch.designer), _units(batch.agent)
    if not designer and not agent:
        return [], {}
    n_agent = len(agent)
    if rule.policy == "reference" and agent:  # the reference counts its duplicates (before the cut)
        n_agent = max(n_agent, rule.global_batch - batch.designs_made)
    scale = designer_scale(n_agent, len(designer) + batch.designer_masked, rule)
    units = designer + agent
    rewards = [u[0].reward for u in units]
    groups = [u[0].group_id for u in units]
    roles = [u[0].role for u in units]
    adv = group_advantages(rewards, groups, roles=roles, role_norm=rule.role_norm,
                           std_roles=(AGENT,) if rule.agent_group_std else (),
                           role_scale={DESIGNER: scale})  # fmt: skip
    # The importance weight corrects sampler-vs-learner numerics (and, for the designer's delayed samples, the
    # policy versions since sampling), so it uses the raw-model log-probs.
    units = [[replace(s, logprobs=s.raw_logprobs or s.logprobs, advantage=float(a)) for s in u]
             for u, a in zip(units, adv)]  # fmt: skip
    stats = {f"train/{k}": v for k, v in group_stats(rewards, groups).items()}
    stats["design/reward_scale"] = scale
    if rule.policy == "reference":
        units, counts = _reference_batch(units[: len(designer)], units[len(designer) :], rule.global_batch,
                                         batch.designs_made)  # fmt: skip
        stats.update(counts)
        real = len(units)
        if 0 < real < rule.global_batch and not rule.extra_terms:
            factor = rule.global_batch / real
            units = [[replace(s, advantage=s.advantage * factor) for s in u] for u in units]
            stats["train/advantage_rescale"] = factor
    if rule.loss_agg == "sample_mean_fixed":
        units = [_weighted(u, rule.global_batch) for u in units]
    keep_zero = rule.extra_terms and rule.loss_agg == "sample_mean_fixed"
    units = [[s for s in u if (keep_zero or s.advantage != 0.0) and _trained(s)] for u in units]
    out = [s for u in units for s in u]
    stats["train/samples"] = float(len(out))
    for role, name in ROLE_NAMES.items():
        made = sum(r == role for r in roles)
        kept = sum(bool(u) and u[0].role == role for u in units)
        stats[f"train/{name}_samples"] = float(sum(s.role == role for s in out))
        stats[f"train/{name}_dropped_frac"] = max(0.0, (made - kept) / made) if made else 0.0
    return out, stats


def _weighted(unit: list[Sample], g: int) -> list[Sample]:
    tokens = sum(_mask_sum(s) for s in unit)
    return [replace(s, loss_weight=1.0 / (max(tokens, 1.0) * g)) for s in unit]


def _mask_sum(s: Sample) -> float:
    return float(len(s.completion_ids) if s.completion_mask is None else sum(s.completion_mask))


def _trained(s: Sample) -> bool:
    return _mask_sum(s) > 0


def band_stats(envs: Sequence[dict[str, Any]], band: tuple[float, float]) -> dict[str, float]:
    """`env/in_band_frac`: the share of the environments scored this step (measured ones) whose unhinted win
    rate lies in the band (memory.positive_band); nothing when none was scored."""
    lo, hi = band
    rates = [e["win_rate_no_hint"] for e in envs if e.get("measured") and e.get("win_rate_no_hint") is not None]
    return {"env/in_band_frac": sum(lo <= r <= hi for r in rates) / len(rates)} if rates else {}


def trained_roles(batch: SelfPlayBatch, train_agent: bool = True) -> tuple[SelfPlayBatch, dict[str, float]]:
    """The batch the learner sees: as played, or without the agent's samples (`selfplay.train_agent=false`)."""
    if train_agent:
        return batch, {}
    return replace(batch, agent=()), {"train/agent_not_trained": float(len(batch.agent))}


def train_on(batch: SelfPlayBatch, learner: Learner, rule: BatchRule, *, buckets: Sequence[int], pad_id: int,
             sync: Callable[[], None]) -> dict[str, float]:  # fmt: skip
    """One learner step on a self-play batch (skipped when no sample carries signal); `sync` points the sampler
    at the new parameters afterwards."""
    batch, left_out = trained_roles(batch, rule.train_agent)
    samples, stats = to_train_samples(batch, rule)
    stats.update(left_out)
    samples, dropped = split_trainable(samples, max(buckets))  # longer than any bucket: counted, not trained
    stats["train/dropped_too_long"] = float(dropped)
    if dropped:  # the counts say what the learner really trains on
        stats["train/samples"] = float(len(samples))
        for role, name in ROLE_NAMES.items():
            stats[f"train/{name}_samples"] = float(sum(s.role == role for s in samples))
    if not samples:
        return {**stats, "train/skipped": 1.0}
    if learner.config.lr == 0:  # a control run (benchmarks/learning.py): AdamW at lr 0 moves no parameter,
        return {**stats, "train/skipped": 0.0, "train/frozen": 1.0}  # so the step's forward and backward are spared
    t0 = time.perf_counter()
    tb = pack_sequences(samples, length_buckets=buckets, pad_id=pad_id)
    metrics = learner.train_step(tb)
    sync()
    dt = time.perf_counter() - t0
    stats.update({f"train/{k}": float(v) for k, v in metrics.items()})
    stats["perf/learner_tokens_per_s"] = float(sum(len(s) for s in samples)) / max(dt, 1e-9)
    stats["train/skipped"] = 0.0
    return stats
