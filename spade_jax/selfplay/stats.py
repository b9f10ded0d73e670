"""The self-play step's counters and measurements, as the flat `name -> float` row the run logs (metrics.jsonl,
TensorBoard): rollout figures, hint counters, design outcomes, the rounds scored, the memory's size, audits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from spade_jax.gates.audit import AuditResult
from spade_jax.selfplay.designer import DesignResult
from spade_jax.selfplay.episodes import EndReason, RolloutResult
from spade_jax.selfplay.hints import HintWriter
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.window import RoundScore
from spade_jax.trajectory import Sample

__all__ = ["audit_stats", "step_stats"]


def step_stats(result: RolloutResult, designs: Sequence[DesignResult], scores: Mapping[str, RoundScore],
               hung: frozenset[str], released: Sequence[Sample], memory: Memory, hint_writer: HintWriter, *,
               open_rounds: int, mutations: bool) -> dict[str, float]:  # fmt: skip
    """The row of one step (see the module doc)."""
    out = {f"rollout/{k}": v for k, v in result.stats().items()}
    out.update(result.hint_stats())
    out.update(hint_writer.stats())
    out.update({f"rollout/failure_{k}": float(v) for k, v in result.failures.items()})
    out["rollout/timeouts_discarded"] = float(sum(e.end_reason == EndReason.TIMEOUT for e in result.episodes))
    out["env/retired_hung"] = float(len(hung))
    if designs:
        out.update(_design_stats(designs, mutations))
    out["design/rounds_open"] = float(open_rounds)
    out["design/samples_released"] = float(len(released))
    if released:  # what the designer is trained on: its designs' rewards, an invalid one's 0 included
        out["design/reward_mean"] = sum(s.reward for s in released) / len(released)
    if scores:
        measured = [s.stats for s in scores.values() if s.stats.measured]
        out["env/scored"] = float(len(scores))
        if measured:
            out["env/regret_mean"] = sum(s.regret for s in measured) / len(measured)
            out["env/win_rate_no_hint_mean"] = sum(s.win_rate_no_hint for s in measured) / len(measured)
            out["env/win_rate_hint_mean"] = sum(s.win_rate_hint for s in measured) / len(measured)
            out["env/return_window_mean"] = sum(s.return_window for s in measured) / len(measured)
        # every environment the round played (seed-library ones too), by the designer's reward rule
        out["env/designer_reward_mean"] = sum(s.reward for s in scores.values()) / len(scores)
        for status, n in Counter(str(s.hint_status) for s in scores.values()).items():
            out[f"env/hint_{status}"] = float(n)  # environments scored with a usable / missing / leaked hint
    out.update({f"memory/{k}": float(v) for k, v in memory.summary().items()})
    return out


def _design_stats(designs: Sequence[DesignResult], mutations: bool) -> dict[str, float]:
    attempts = [a for d in designs for a in d.attempts]
    out = {
        "design/targets": float(len(designs)),
        "design/valid_frac": sum(d.valid for d in designs) / len(designs),
        "design/attempts": float(len(attempts)),
        "design/retried_valid": float(sum(d.valid and len(d.attempts) > 1 for d in designs)),
    }
    for gate, n in Counter(a.verdict.gate for a in attempts if not a.valid).items():
        out[f"design/failed_{gate}"] = float(n)
    if mutations:
        muts = [d for d in designs if d.mutation_of]
        out["design/mutations"] = float(len(muts))
        out["design/mutation_fallbacks"] = float(sum(bool(d.target.parent_id and not d.mutation_of) for d in designs))
        if muts:
            out["design/mutation_valid_frac"] = sum(d.valid for d in muts) / len(muts)
    return out


def audit_stats(audits: Mapping[str, AuditResult], broken: frozenset[str]) -> dict[str, float]:
    """The step's audit counters: environments audited, audit episodes, inconclusive audits, and environments
    retired for a broken contract (audits and plays)."""
    if not audits and not broken:
        return {}
    return {
        "audit/envs": float(len(audits)),
        "audit/episodes": float(sum(a.episodes for a in audits.values())),
        "audit/replayed": float(sum(a.replayed for a in audits.values())),
        "audit/inconclusive": float(sum(bool(a.inconclusive) for a in audits.values())),
        "audit/random_wins": float(sum(a.random_wins for a in audits.values())),
        "audit/hint_leaked": float(sum(a.hint_leaked for a in audits.values())),
        "env/retired_broken": float(len(broken)),
    }
