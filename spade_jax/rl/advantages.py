"""GRPO-style advantages: reward minus its group's mean, optionally divided by the group's std for some roles,
scaled per role, then optionally normalised per role.

A group is the set of samples that answer the same prompt (e.g. the K plays of one environment, or the
designs of one skill in one design round). The reference recipe (`--spade-reward-normalization grpo` with
slime's own normalisation off) z-scores the agent's rewards within each group, `(r - mean) / (std + 1e-8)`,
and only centres the designer's, multiplying them by a scale: `std_roles=(0,)` and `role_scale={1: s}`.
`role_norm="std"` then divides each role's advantages by that role's standard deviation over the batch
(ours, off in the paper presets); `"none"` leaves them. Plain numpy: this runs on the host between rollouts
and packing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spade_jax.config.learner import ROLE_NORMS


def group_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Any],
    *,
    roles: Sequence[int] | None = None,
    role_norm: str = "std",
    std_roles: Sequence[int] = (),
    role_scale: Mapping[int, float] | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """Per-sample advantages: reward - mean(reward of its group) (divided by the group's std + 1e-8 for the
    roles in `std_roles`), times `role_scale[role]`, then per-role normalisation.

    Groups are given by any hashable ids. A group of one gets advantage 0, as does a group whose rewards are
    all equal. With role_norm="std" each role's advantages are divided by max(std, eps) computed over that
    role's samples in the batch (a role whose advantages are all 0 stays 0).
    """
    if role_norm not in ROLE_NORMS:
        raise ValueError(f"role_norm={role_norm!r}; expected one of {ROLE_NORMS}")
    r = np.asarray(rewards, np.float64)
    if r.ndim != 1 or len(group_ids) != r.shape[0]:
        raise ValueError(f"rewards ({r.shape}) and group_ids ({len(group_ids)}) must be equal-length 1-D")
    role_arr = np.zeros(r.shape[0], np.int64) if roles is None else np.asarray(roles)
    if role_arr.shape != r.shape:
        raise ValueError(f"roles has {role_arr.shape[0]} entries for {r.shape[0]} rewards")
    adv = np.zeros_like(r)
    index: dict[Any, list[int]] = {}
    for i, g in enumerate(group_ids):
        index.setdefault(g, []).append(i)
    for members in index.values():
        if np.ptp(r[members]) == 0:  # exactly 0 (a mean of equal floats can be off by an ulp)
            continue
        centred = r[members] - r[members].mean()
        if len(members) > 1 and np.isin(role_arr[members], list(std_roles)).all():
            centred = centred / (r[members].std() + 1e-8)
        adv[members] = centred
    for role, scale in (role_scale or {}).items():
        adv[role_arr == role] *= scale
    if role_norm == "std":
        for role in np.unique(role_arr):
            sel = role_arr == role
            std = adv[sel].std()
            if std > 0:
                adv[sel] /= max(std, eps)
    return adv.astype(np.float32)


def group_stats(rewards: Sequence[float], group_ids: Sequence[Any]) -> dict[str, float]:
    """Batch diagnostics: mean reward, fraction of groups with any reward spread (those carry signal)."""
    r = np.asarray(rewards, np.float64)
    groups: dict[Any, list[float]] = {}
    for g, x in zip(group_ids, r):
        groups.setdefault(g, []).append(x)
    informative = sum(1 for v in groups.values() if len(v) > 1 and np.ptp(v) > 0)
    return {
        "reward_mean": float(r.mean()) if r.size else 0.0,
        "groups": float(len(groups)),
        "informative_group_frac": informative / max(len(groups), 1),
    }
