"""The learner half of a step: rewards -> group advantages -> learner samples -> one learner step.

Samples whose advantage is 0 carry no signal and are dropped, and samples longer than every length bucket are
dropped too; both are counted in the step's metrics (`train/*_dropped_frac`, `train/dropped_too_long`). At
learning rate 0 (the learning benchmark's control) the step is counted but not computed (`train/frozen`). With
`selfplay.train_agent=false` the agent's samples are left out before anything else (`train/agent_not_trained`
counts them): only the designer learns.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from spade_jax.config.run import LoopConfig
from spade_jax.rl.advantages import group_advantages, group_stats
from spade_jax.rl.batch import Sample, pack_sequences, split_trainable
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.trajectory import AGENT, DESIGNER, ROLE_NAMES

__all__ = ["band_stats", "to_train_samples", "train_on", "trained_roles"]


def to_train_samples(batch: SelfPlayBatch, loop: LoopConfig = LoopConfig()) -> tuple[list[Sample], dict[str, float]]:
    """Rewards -> group advantages (the agent's z-scored per group, the designer's centred per skill and round
    and scaled) -> learner samples; samples whose advantage is 0 carry no signal and are dropped (counted)."""
    samples = batch.samples
    if not samples:
        return [], {}
    rewards = [s.reward for s in samples]
    groups = [s.group_id for s in samples]
    roles = [s.role for s in samples]
    adv = group_advantages(rewards, groups, roles=roles, role_norm=loop.role_norm,
                           std_roles=(AGENT,) if loop.agent_group_std else (),
                           role_scale={DESIGNER: batch.designer_scale})  # fmt: skip
    out = [
        # The importance weight corrects sampler-vs-learner numerics (and, for the designer's delayed samples,
        # the policy versions since sampling), so it uses the raw-model log-probs.
        replace(s, logprobs=s.raw_logprobs or s.logprobs, advantage=float(a))
        for s, a in zip(samples, adv)
        if a != 0.0
    ]
    stats = {f"train/{k}": v for k, v in group_stats(rewards, groups).items()}
    stats["train/samples"] = float(len(out))
    for role, name in ROLE_NAMES.items():
        made = sum(r == role for r in roles)
        kept = sum(s.role == role for s in out)
        stats[f"train/{name}_samples"] = float(kept)
        stats[f"train/{name}_dropped_frac"] = (made - kept) / made if made else 0.0
    return out, stats


def band_stats(envs: list[dict[str, Any]], band: tuple[float, float]) -> dict[str, float]:
    """`env/in_band_frac`: the share of the environments scored this step (measured ones) whose unhinted win
    rate lies in the band (memory.positive_band); nothing when none was scored."""
    lo, hi = band
    rates = [e["win_rate_no_hint"] for e in envs if e.get("measured") and e.get("win_rate_no_hint") is not None]
    return {"env/in_band_frac": sum(lo <= r <= hi for r in rates) / len(rates)} if rates else {}


def trained_roles(batch: SelfPlayBatch, train_agent: bool = True) -> tuple[SelfPlayBatch, dict[str, float]]:
    """The batch the learner sees: as played, or without the agent's samples (`selfplay.train_agent=false`)."""
    if train_agent:
        return batch, {}
    kept = [s for s in batch.samples if s.role != AGENT]
    return replace(batch, samples=kept), {"train/agent_not_trained": float(len(batch.samples) - len(kept))}


def train_on(parts: Any, batch: SelfPlayBatch) -> dict[str, float]:
    """One learner step on a self-play batch (skipped when no group carries signal)."""
    selfplay = getattr(parts.cfg, "selfplay", None)  # a test's stand-in config may have none: both roles train
    batch, frozen = trained_roles(batch, selfplay is None or selfplay.train_agent)
    samples, stats = to_train_samples(batch, parts.cfg.loop)
    stats.update(frozen)
    buckets = parts.cfg.learner.length_buckets_for(parts.cfg.max_total_len)
    samples, dropped = split_trainable(samples, max(buckets))  # longer than any bucket: counted, not trained
    stats["train/dropped_too_long"] = float(dropped)
    if dropped:  # the counts say what the learner really trains on
        stats["train/samples"] = float(len(samples))
        for role, name in ROLE_NAMES.items():
            stats[f"train/{name}_samples"] = float(sum(s.role == role for s in samples))
    if not samples:
        return {**stats, "train/skipped": 1.0}
    if parts.cfg.learner.lr == 0:  # a control run (benchmarks/learning.py): AdamW at lr 0 moves no parameter,
        return {**stats, "train/skipped": 0.0, "train/frozen": 1.0}  # so the step's forward and backward are spared
    t0 = time.perf_counter()
    tb = pack_sequences(samples, length_buckets=buckets, pad_id=getattr(parts.tokenizer, "pad_id", None) or 0)
    metrics = parts.learner.train_step(tb)
    parts.sync_sampler()
    dt = time.perf_counter() - t0
    stats.update({f"train/{k}": float(v) for k, v in metrics.items()})
    stats["perf/learner_tokens_per_s"] = float(sum(len(s) for s in samples)) / max(dt, 1e-9)
    stats["train/skipped"] = 0.0
    return stats
