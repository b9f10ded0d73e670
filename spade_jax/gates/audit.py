"""Audits on the training seeds: an environment that passed the gates is re-checked where it is trained.

The gates play an environment on secret seeds of their own, so it cannot tell them apart in advance; but it
could still behave on any seed it is validated on and misbehave elsewhere (every reply wins, rewards out of
range, replies it no longer answers deterministically). So at every step every environment played is also
played, with no model, on the very reset seeds the agent plays that step (so every training episode's seed
is audited):
- a no-op reply (an empty box / an empty answer) on every one of them: a win is a violation ("any reply wins");
- the gates' generic random policy on the first `AuditConfig.random_plays` (default 4): winning every one of
  them (at least 3) is a violation (the gates bound random play at 15% of their own seeds; four wins in a row
  of an honest environment at that rate happen 0.05% of the time);
- the first random episode played twice: a different transcript is a violation (not deterministic);
- any step reward outside [-1, 1], and a step that raised, hung or ran out of memory on a training seed;
- at a step where the agent is shown the environment's own hint(): each word and number of the hint that is not in the
  first observation, sent as the first reply; winning at once that way on at least half of the seeds (and two)
  is a violation (the hint is the answer). The in-sandbox leak check of every hinted play catches most such
  hints too, but not short answers (a single digit); neither catches an answer the hint spells out in other
  words, which is why hints are model-written by default (`hints.source="model"`).
The agent's own plays are checked the same way for rewards (`rollouts.Episode.violation`), and every hinted
play's hint is checked for the answer in the sandbox (rollouts, `check_hint_leaks`).

A violating environment earns its designer `AuditConfig.violation_reward`, is retired from its round and
from the archive, and none of its plays of that step is trained. A failure that is not the environment's
(the sandbox crashed or could not start) leaves the audit inconclusive: no violation. Nothing here raises.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from spade_jax.envs.outcome import episode_outcome
from spade_jax.gates.probes import GenericPolicy, answer_action, guess_kind, noop_action
from spade_jax.interfaces import EnvPool

__all__ = ["AuditResult", "Auditor", "reward_violation"]

# Failures on a training seed that are the environment's doing (the others are the host's: inconclusive).
_ENV_FAULTS = ("timeout", "exception", "bad_return", "memory")
_MIN_ALL_WINS = 3
_MAX_ECHOES = 12  # hint tokens tried per seed
_TOKEN_RE = re.compile(r"-?\d+(?:\.\d+)?|[a-z][a-z'-]*")


def reward_violation(reward: Any) -> str:
    """'' for a step reward in the contract's range [-1, 1], else why not (the pool already refuses non-finite
    and non-numeric ones)."""
    try:
        if -1.0 <= reward <= 1.0:  # ints compare exactly, however large
            return ""
    except TypeError:
        return f"a step reward is not a number ({type(reward).__name__})"
    return f"a step reward ({str(reward)[:24]}) is outside [-1, 1] on a training seed"


@dataclass
class AuditResult:
    """One environment's audit: `violation` is '' or why the environment broke its contract."""

    env_id: str
    episodes: int = 0
    random_wins: int = 0
    noop_won: bool = False
    violation: str = ""
    inconclusive: str = ""  # a host-side failure stopped the audit (never held against the environment)


class _Fault(Exception):
    """A failed call during an audit: `env_fault` tells whether it is the environment's."""

    def __init__(self, error: str | None, message: str):
        super().__init__(message)
        self.env_fault = error in _ENV_FAULTS
        self.error = error or "crashed"


class Auditor:
    """Plays the audit episodes of many environments in parallel on a host pool (one session per episode)."""

    def __init__(self, pool: EnvPool, *, random_plays: int = 3, max_turns: int = 25, max_workers: int | None = None):
        self.pool, self.random_plays, self.max_turns = pool, int(random_plays), int(max_turns)
        workers = max_workers or getattr(pool, "capacity", getattr(pool, "num_workers", None)) or 4
        self._executor = ThreadPoolExecutor(max_workers=max(1, int(workers)), thread_name_prefix="audit")

    def run(self, envs: Sequence[tuple]) -> dict[str, AuditResult]:
        """Audits `(env_id, source, training seeds[, env_hint])` for each environment; one result per env_id."""
        return dict(zip([e[0] for e in envs], self._executor.map(lambda e: self.audit(*e), envs)))

    def audit(self, env_id: str, source: str, seeds: Sequence[int], env_hint: bool = False) -> AuditResult:
        """The audit of one environment on its training seeds (see the module docstring); `env_hint`: the agent
        is shown the environment's own hint()."""
        out = AuditResult(env_id)
        seeds = [int(s) for s in seeds]
        try:
            if env_hint:
                given = [seed for seed in seeds if self._hint_wins(source, seed)]
                if len(given) >= max(2, (len(seeds) + 1) // 2):
                    why = (
                        f"the hint gives the answer away: a word of it wins at once on {len(given)}/{len(seeds)} seeds"
                    )
                    return _violate(out, why)
            for seed in seeds:
                won, _ = self._episode(source, seed, "noop", out)
                if won:
                    out.noop_won = True
                    return _violate(out, f"a no-op reply wins on training seed {seed}: any reply wins")
            transcripts = []
            for seed in seeds[: self.random_plays]:
                won, transcript = self._episode(source, seed, "random", out)
                out.random_wins += won
                transcripts.append(transcript)
            if transcripts:
                _, again = self._episode(source, seeds[0], "random", out)
                if again != transcripts[0]:
                    why = f"not deterministic on training seed {seeds[0]} (the same replies, another transcript)"
                    return _violate(out, why)
            n = len(transcripts)
            if n >= _MIN_ALL_WINS and out.random_wins == n:
                return _violate(out, f"random replies win all {n} plays on the training seeds")
        except _Fault as f:
            if f.env_fault:
                return _violate(out, f"{f.error} on a training seed: {f}")
            out.inconclusive = f"{f.error}: {f}"
        except Exception as e:  # a last line of defence: an audit never ends a run
            out.inconclusive = f"audit failed: {type(e).__name__}: {e}"
        return out

    @contextlib.contextmanager
    def _session(self, source: str) -> Iterator[Any]:
        """A loaded session of `source`, closed on the way out; `_Fault` when the program does not load."""
        session = self.pool.open(source, env_kwargs={"max_turns": self.max_turns})
        try:
            load = getattr(session, "load_result", None)
            if load is not None and not getattr(load, "ok", True):
                raise _Fault(getattr(load, "error", None) or "load_error", getattr(load, "message", "") or "load")
            yield session
        finally:
            try:
                session.close()
            except Exception:  # closing is the pool's business; its own failures are logged there
                pass

    def _episode(self, source: str, seed: int, policy: str, out: AuditResult) -> tuple[bool, list]:
        """One audit episode in a fresh session, counted in `out.episodes`; (won, transcript). `_Fault` on a
        failed call or a reward out of range."""
        with self._session(source) as session:
            obs, info = _value(session.reset(seed), 2)
            info = info if isinstance(info, dict) else {}
            kind = guess_kind(obs if isinstance(obs, str) else "", info)
            tools = info.get("tools") if isinstance(info.get("tools"), list) else None
            agent = GenericPolicy(random.Random(seed), kind, tools)
            transcript: list = [obs]
            out.episodes += 1
            for _ in range(self.max_turns):
                agent.observe(obs)
                action = noop_action(kind) if policy == "noop" else agent.act()
                obs, reward, terminated, truncated, _ = _value(session.step(action), 5)
                problem = reward_violation(reward)
                if problem:
                    raise _Fault("bad_return", problem)
                transcript.append((obs, reward, bool(terminated), bool(truncated)))
                if terminated or truncated:
                    return episode_outcome([reward], bool(terminated))[1], transcript
            return False, transcript

    def _hint_wins(self, source: str, seed: int) -> bool:
        """Whether one of the hint's own words or numbers (not in the first observation), sent as the first
        reply, wins the episode at once: one session, reset with `seed` before each try."""
        with self._session(source) as session:
            obs, info = _value(session.reset(seed), 2)
            res = session.hint()
            hint = res.value if getattr(res, "ok", False) else None
            if not isinstance(hint, str):
                return False
            kind = guess_kind(obs if isinstance(obs, str) else "", info if isinstance(info, dict) else {})
            seen = set(_TOKEN_RE.findall(str(obs).lower()))
            tries = [t for t in dict.fromkeys(_TOKEN_RE.findall(hint[:2000].lower())) if t not in seen]
            for token in tries[:_MAX_ECHOES]:
                _value(session.reset(seed), 2)
                _, reward, terminated, _, _ = _value(session.step(answer_action(kind, token)), 5)
                if episode_outcome([reward], bool(terminated))[1]:
                    return True
            return False

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def _value(res: Any, n: int) -> tuple:
    """The value of a call result as an n-tuple, or `_Fault`."""
    if not getattr(res, "ok", False):
        raise _Fault(getattr(res, "error", None), getattr(res, "message", "") or "failed")
    value = res.value
    if not isinstance(value, list | tuple) or len(value) != n:
        raise _Fault("bad_return", f"expected a {n}-tuple")
    return tuple(value)


def _violate(out: AuditResult, why: str) -> AuditResult:
    out.violation = why[:300]
    return out
