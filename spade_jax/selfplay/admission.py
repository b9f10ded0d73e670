"""What the memory learns from a step's plays (`memory.admission`), and which environments leave the archive.

- "running" (ours): every environment played is updated at every step with its round's window so far (unhinted
  win rate, mean returns, regret), so exemplars follow the agent as it learns.
- "reference" (spade_rollout.py, `_ENV_MEMORY.add`): an environment enters once, after the plays of its
  regeneration step, with that step's numbers, and is never updated: win rate = the share of that step's
  unhinted plays with a return above 0, regret = mean hinted return minus mean unhinted return of that step
  (unfloored; 0 when the hinted arm is unusable). An environment with no play kept is not entered. Until then
  it has no win rate, so it is no exemplar.
An environment that broke its contract leaves the archive either way (`Memory.retire`).
"""

from __future__ import annotations

from spade_jax.config.selfplay import SelfPlayConfig
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.window import HINT_OK, Recorded, Round, window_stats

__all__ = ["remember"]


def remember(memory: Memory, rnd: Round, recorded: Recorded, step: int, config: SelfPlayConfig) -> None:
    """Writes what a step's plays (`recorded`, at `step` of round `rnd`) tell the memory; retires the broken."""
    if config.memory.admission == "reference":
        if step == rnd.start:
            _admit(memory, rnd, recorded)
    else:
        _update(memory, rnd, recorded, config)
    for env_id in recorded.broken:
        memory.retire(env_id)


def _admit(memory: Memory, rnd: Round, recorded: Recorded) -> None:
    for env_id in recorded.played:
        env, rec = rnd.envs[env_id], memory.get(env_id)
        plays = env.step_plays(0)
        if rec is None or rec.measured or not plays:  # outside the memory, already entered, or nothing kept
            continue
        returns = [r for r, _ in plays]
        mean = sum(returns) / len(returns)
        hinted = env.hint_returns if env.hint_status == HINT_OK else []
        regret = sum(hinted) / len(hinted) - mean if hinted else 0.0
        memory.update_stats(env_id, win_rate_no_hint=sum(r > 0 for r in returns) / len(returns), return_no_hint=mean,
                            regret=regret, return_hint=sum(hinted) / len(hinted) if hinted else None,
                            plays=recorded.played[env_id])  # fmt: skip


def _update(memory: Memory, rnd: Round, recorded: Recorded, config: SelfPlayConfig) -> None:
    frac = config.reward.min_plays_fraction if config.strict else 0.0
    expected = rnd.plays or config.plays_per_condition
    for env_id, n in recorded.played.items():
        if memory.get(env_id) is None:  # environments outside the memory are not archived
            continue
        st = window_stats(rnd.envs[env_id], expected_plays=expected, min_plays_fraction=frac,
                          expected_hint=rnd.hint_plays or expected)  # fmt: skip
        if not st.measured:
            memory.update_stats(env_id, plays=n)
            continue
        hinted = st.n_hint > 0
        memory.update_stats(env_id, win_rate_hint=st.win_rate_hint if hinted else None,
                            win_rate_no_hint=st.win_rate, return_hint=st.return_hint if hinted else None,
                            return_no_hint=st.return_no_hint, regret=st.regret, plays=n)  # fmt: skip
