"""The run's health, measured the way the SPADE paper measures it, from one step's records (issue 48).

- Learnable share: the share of the scored environments whose unhinted win rate lies in [0.2, 0.8] (the paper's
  band; it reports the share rising from 0.16 to 0.31 over training), over the environments a closing round scored
  (their whole window's plays) and, every step, over the environments played that step (that step's plays only).
- Diversity: the Vendi score of a set of programs, exp(entropy of the eigenvalues of K / n), where K is the
  similarity of every pair of programs by the novelty gate's own shingles (gates/novelty.py: the mean of the
  Jaccard similarities of their canonical-structure and their code-token shingles; Jaccard on sets is a positive
  semi-definite kernel, so their mean is one too). It counts "effectively different programs": 1 when all are
  copies, n when no two share a shingle. Taken over the round's valid designs and over the archive.
- Collapse: an environment's class is its family as the novelty gate sees it (a program joins the class of the
  first archived program it duplicates or nearly duplicates: the same game up to names, constants and small
  edits); the largest share of one class in the archive, and the longest run of one class in archive order.
- Regret: mean, spread and the share of negative regrets (a hint that hurt) over the environments whose hint
  counted, and the designer's blend apart: its regret term and its plateau term (selfplay/regret.py), whatever
  reward the run trains on.

Everything here is a pure function of plain records: no model, no sandbox, no file. A program that does not parse
still has its code-token shingles; an environment without a measurement is left out of the shares; a quantity
with nothing to measure is absent from the returned row rather than 0. Nothing here can fail a step.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from spade_jax.config.selfplay import RewardConfig
from spade_jax.gates.novelty import Fingerprint, NoveltyConfig, fingerprint
from spade_jax.selfplay.episodes import NO_HINT
from spade_jax.selfplay.regret import plateau
from spade_jax.trajectory import AGENT

__all__ = [
    "LEARNABLE_BAND",
    "blend_terms",
    "classes",
    "collapse",
    "health_stats",
    "learnable_share",
    "regret_figures",
    "similarity_matrix",
    "step_health",
    "vendi_score",
]

LEARNABLE_BAND = (0.2, 0.8)  # the paper's "learnable" win rates
_NOVELTY = NoveltyConfig()  # the gate's shingle sizes and duplicate thresholds


@lru_cache(maxsize=4096)
def _print(source: str) -> Fingerprint:
    """The novelty gate's fingerprint of a program, kept: the archive is measured again every step."""
    return fingerprint(source, _NOVELTY)


def _jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _views(source: str) -> tuple[frozenset[int], frozenset[int]]:
    """The program's two shingle sets: structure (its text again when it does not parse, so that a copy of a broken
    program is still a copy) and text."""
    fp = _print(source)
    return (fp.structure or fp.text), fp.text


def similarity_matrix(sources: Sequence[str]) -> np.ndarray:
    """K[i, j]: the mean of the structure and the text Jaccard similarity of programs i and j; K[i, i] = 1."""
    views = [_views(s) for s in sources]
    n = len(views)
    k = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            (sa, ta), (sb, tb) = views[i], views[j]
            k[i, j] = k[j, i] = 0.5 * (_jaccard(sa, sb) + _jaccard(ta, tb))
    return k


def vendi_score(sources: Sequence[str]) -> float | None:
    """exp(-sum(l log l)) over the eigenvalues l of K / n (Friedman and Dieng's Vendi score); None for no program."""
    if not sources:
        return None
    eig = np.linalg.eigvalsh(similarity_matrix(sources) / len(sources))
    eig = np.clip(eig, 0.0, None)  # rounding leaves tiny negative eigenvalues of a semi-definite K
    eig = eig[eig > 1e-12] / eig.sum()
    return float(math.exp(-np.sum(eig * np.log(eig))))


def _same_family(a: Fingerprint, b: Fingerprint) -> bool:
    """What the novelty gate calls a duplicate: identical after canonicalisation, or near it by either view."""
    if a.digest == b.digest:
        return True
    return (_jaccard(a.structure, b.structure) >= _NOVELTY.max_structure_sim
            or _jaccard(a.text, b.text) >= _NOVELTY.max_text_sim)  # fmt: skip


def classes(sources: Sequence[str]) -> list[int]:
    """Each program's class, in order: the index of the first earlier program of its family (or its own)."""
    reps: list[tuple[int, Fingerprint]] = []
    out = []
    for source in sources:
        fp = _print(source)
        found = next((c for c, rep in reps if _same_family(fp, rep)), None)
        if found is None:
            found = len(reps)
            reps.append((found, fp))
        out.append(found)
    return out


def collapse(labels: Sequence[Any]) -> dict[str, float]:
    """The largest share of one label, the longest run of one label (in the given order), the number of labels."""
    if not labels:
        return {}
    longest = run = 1
    for prev, cur in zip(labels, labels[1:]):
        run = run + 1 if cur == prev else 1
        longest = max(longest, run)
    counts = Counter(labels)
    return {"top_class_share": max(counts.values()) / len(labels), "longest_class_run": float(longest),
            "classes": float(len(counts))}  # fmt: skip


def learnable_share(rates: Iterable[float], band: tuple[float, float] = LEARNABLE_BAND) -> float | None:
    """The share of win rates inside `band` (ends included); None for no rate."""
    rates = list(rates)
    if not rates:
        return None
    lo, hi = band
    return sum(lo <= r <= hi for r in rates) / len(rates)


def _clean(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The scored rows that carry a measurement and were not retired (a hang, a broken contract)."""
    return [r for r in rows if r.get("measured") and not r.get("timeouts") and not r.get("violation")]


def regret_figures(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Mean, standard deviation and share of negative regrets over the measured rows whose hint counted."""
    regrets = [float(r["regret"]) for r in _clean(rows) if r.get("hint_status") == "ok" and r.get("n_hint")]
    if not regrets:
        return {}
    return {"regret_mean": float(np.mean(regrets)), "regret_std": float(np.std(regrets)),
            "regret_negative_frac": sum(x < 0 for x in regrets) / len(regrets),
            "regret_envs": float(len(regrets))}  # fmt: skip


def blend_terms(rows: Iterable[Mapping[str, Any]], reward: RewardConfig = RewardConfig()) -> dict[str, float]:
    """The paper blend's two terms, averaged over the measured rows: w_r * clip(regret / scale, 0, 1) and
    w_p * plateau(unhinted win rate); their sum is the blend's reward (regret is 0 where the hint did not count)."""
    clean = _clean(rows)
    if not clean:
        return {}
    regret = [reward.regret_weight * min(1.0, max(0.0, float(r["regret"]) / reward.regret_scale)) for r in clean]
    flat = [reward.plateau_weight * plateau(float(r["win_rate_no_hint"]), reward.plateau_lo, reward.plateau_hi,
                                            reward.plateau_ramp) for r in clean]  # fmt: skip
    return {"blend_regret_part": float(np.mean(regret)), "blend_plateau_part": float(np.mean(flat))}


def health_stats(
    envs: Sequence[Mapping[str, Any]] = (),
    plays: Mapping[str, Sequence[bool]] | None = None,
    designs: Sequence[str] = (),
    archive: Sequence[str] = (),
    *,
    reward: RewardConfig = RewardConfig(),
    band: tuple[float, float] = LEARNABLE_BAND,
) -> dict[str, float]:
    """The step's health row (`health/...`) from plain records: `envs`, the scored rows of the rounds that closed
    (SelfPlayBatch.envs); `plays`, each environment's unhinted outcomes this step; `designs`, the sources of the
    round's valid designs; `archive`, the archive's sources in archive order."""
    out: dict[str, float | None] = {}
    scored = _clean(envs)
    out["learnable_frac"] = learnable_share((float(r["win_rate_no_hint"]) for r in scored), band)
    if scored:
        out["scored_envs"] = float(len(scored))
    rates = [sum(map(bool, w)) / len(w) for w in (plays or {}).values() if w]
    out["step_learnable_frac"] = learnable_share(rates, band)
    out.update(regret_figures(envs))
    out.update(blend_terms(envs, reward))
    if designs:
        out["vendi_round"] = vendi_score(designs)
        out["round_designs"] = float(len(designs))
    if archive:
        out["vendi_archive"] = vendi_score(archive)
        out.update({f"archive_{k}": v for k, v in collapse(classes(archive)).items()})
    return {f"health/{k}": float(v) for k, v in out.items() if v is not None}


def step_health(batch: Any, memory: Any, step: int, reward: RewardConfig = RewardConfig()) -> dict[str, float]:
    """`health_stats` of a self-play step, read from its batch (scored rows; the agent's unhinted plays, from the
    samples' meta) and the memory (the step's valid designs; the archive)."""
    plays: dict[str, list[bool]] = {}
    for s in batch.samples:
        meta = s.meta or {}
        if s.role == AGENT and meta.get("condition") == NO_HINT and "env_id" in meta:
            plays.setdefault(meta["env_id"], []).append(bool(meta.get("won")))
    designs = [r.code for r in memory.attempts(step) if r.verdict_valid and r.origin in ("designer", "mutation")]
    archive = [r.code for r in memory.archive()]
    return health_stats(batch.envs, plays, designs, archive, reward=reward)
