"""Audits of every step's plays, with the agent's own traffic: a checker the environment cannot tell from the agent.

The gates play an environment on secret seeds of their own; it may still behave on any seed and misbehave where
it is trained, or behave for anything that does not look like the agent (bare replies, lower case, fast replies,
several resets in a session, a reply format it chose) and pay the agent for nothing. So at every step, every
environment played is checked again, in fresh sessions shaped like the agent's (one reset a session, reset and
step only, the agent's replies, sent at the agent's own pace), on the very seeds the agent played:

  * every finished play of the agent is REPLAYED with the agent's exact replies: any difference in observations,
    rewards or termination is a violation (determinism, checked on the real plays);
  * on every seed the agent's replies are sent again with their final answer EMPTY (no-op), and on the first
    `random_plays` seeds (default 4) with a RANDOM answer drawn from the observation (the agent's prose, capitals
    and format, the format the trainer uses for the kind the run assigned, never one the environment claims): a
    no-op that wins is a violation ("any reply wins"), and so is winning every random play (at least 3). The
    checks on the first `random_plays` seeds, and the replays of those seeds, are paced like the agent;
  * at a step where hints are shown, the hint's CANDIDATE ANSWERS (numbers, number words written as digits,
    letters spelled out, quoted and capitalised words, every word of the hint, whether or not the observation
    shows it) are each sent as the first reply, in the agent's own first reply, on up to three hinted seeds: a
    candidate that wins on at least two seeds (and half of those tried) is a hint that gives the answer away
    (`hint_leaked`: no regret for it; with the environment's own hint() a violation, since it wrote it);
  * any step reward outside [-1, 1], and any failure that is the environment's (a timeout, an exception, a bad
    return, memory, its process dying: `sandbox.replies.ENV_FAULTS`) during a check or the agent's own play, is a
    violation. Only a failure of the host (`unavailable`: the sandbox could not start or died, the call was
    starved by others) leaves the audit inconclusive; the run then trains none of that environment's plays of
    the step (default-deny) but does not retire it.

A violating environment earns its designer `reward.violation_reward`, is retired from its round and from the
archive, and none of its plays of that step is trained. Nothing here raises. `Auditor.run` audits environments
without agent plays (a model-like prose template stands in for the agent's replies).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from spade_jax.envs.base import canonical_action
from spade_jax.envs.outcome import reward_problem
from spade_jax.gates.player import AgentShaped, first_difference, play, replace_answer
from spade_jax.gates.probes import GenericPolicy, usable_tools
from spade_jax.interfaces import EnvPool
from spade_jax.sandbox.replies import ENV_FAULTS

__all__ = ["AgentPlay", "AuditEnv", "AuditResult", "Auditor", "hint_candidates", "reward_violation"]

_MIN_ALL_WINS = 3
MAX_CANDIDATES = 16  # hint candidates tried per seed
# Words too common to be anyone's answer; skipped so the candidates that could be reach the first reply.
_STOPWORDS = frozenset(
    "a an the and or but of to in on at by for with from as is are was were be been it its this that these those "
    "then than so if not no you your i we they he she them it's what which who whom how when where why do does "
    "did can could should would will may might must just only also very more most less first next last one".split()
)
ECHO_SEEDS = 3  # hinted seeds the candidates are tried on
# A model's reply when no agent play of the environment is at hand (Auditor.run): prose around the answer.
PROSE = ("Let me think about this carefully. The clues point one way, so I will go with this.\n\n\\boxed{}",)
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}  # fmt: skip
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i > 1}
_SCALES = {"hundred": 100, "thousand": 1000}


def reward_violation(reward: Any) -> str:
    """'' for a step reward in the contract's range (`envs.outcome.reward_problem`), else why not, on a seed."""
    problem = reward_problem(reward)
    return f"a step {problem} on a training seed" if problem else ""


@dataclass(frozen=True)
class AuditEnv:
    """An environment to audit: its id, source, the kind the run assigned it (the replies' format), whether the
    agent is shown its own hint() (`env_hint`) and, for a model-written hint, the hint."""

    env_id: str
    source: str
    kind: str = "game"
    env_hint: bool = False
    hint: str | None = None


@dataclass(frozen=True)
class AgentPlay:
    """One play of the agent as the environment saw it: the seed, hinted or not, the replies as written (`texts`)
    and as stepped (`actions`), reset's observation and each step's (observation, reward, terminated, truncated),
    the seconds before each step (`gaps`), the hint shown, and `error` when the play failed ('' if not)."""

    env_id: str
    seed: int
    hinted: bool
    texts: tuple[str, ...]
    actions: tuple[str, ...]
    transcript: tuple = ()
    gaps: tuple[float, ...] = ()
    hint: str | None = None
    error: str = ""

    @classmethod
    def from_episode(cls, ep: Any) -> AgentPlay:
        """From a rollout's Episode (`selfplay.episodes`), read by attribute: only plain data crosses."""
        trace = getattr(ep, "trace", None) or []
        texts = tuple(m.get("content", "") for m in (ep.messages or []) if m.get("role") == "assistant")
        transcript = (("reset", getattr(ep, "reset_obs", "")), *((s[1], s[2], s[3], s[4]) for s in trace))
        error = ep.error if (ep.discarded and ep.error) else ("timeout" if ep.end_reason == "timeout" else "")
        return cls(ep.env_id, int(ep.spec.seed), ep.condition == "hint", texts, tuple(s[0] for s in trace),
                   transcript, tuple(s[5] for s in trace), ep.hint, error or "")  # fmt: skip


@dataclass
class AuditResult:
    """One environment's audit: `violation` is '' or why it broke its contract; `hint_leaked` when a candidate of
    its hint won at once; `inconclusive` when a host-side failure kept a check from running."""

    env_id: str
    episodes: int = 0
    replayed: int = 0
    random_wins: int = 0
    noop_won: bool = False
    hint_leaked: bool = False
    violation: str = ""
    inconclusive: str = ""
    checks: dict = field(default_factory=dict)


class _Fault(Exception):
    """A failed call during a check: `env_fault` tells whether it is the environment's."""

    def __init__(self, error: str | None, message: str):
        super().__init__(message)
        self.error = error or "unavailable"
        self.env_fault = self.error in ENV_FAULTS


@dataclass(frozen=True)
class _Job:
    env: AuditEnv
    check: str  # replay | noop | random | echo
    seed: int
    reply: Callable[[int, str], str]
    turns: int
    gaps: tuple[float, ...] = ()
    expect: tuple = ()  # the agent's transcript, for a replay
    candidate: str = ""
    generic: GenericPolicy | None = None  # told the tools reset lists, for random tool calls


class Auditor:
    """Runs the step's audit sessions of many environments at once on a host pool (one session per check)."""

    def __init__(self, pool: EnvPool, *, random_plays: int = 4, max_turns: int = 25, max_workers: int | None = None,
                 action_parsing: str = "raw", sleep: Callable[[float], None] | None = None):  # fmt: skip
        self.pool, self.random_plays, self.max_turns = pool, int(random_plays), int(max_turns)
        self.action_parsing = action_parsing  # what step() gets of a reply, as the rollouts send it
        workers = max_workers or getattr(pool, "capacity", getattr(pool, "num_workers", None)) or 4
        self._executor = ThreadPoolExecutor(max_workers=max(1, int(workers)), thread_name_prefix="audit")
        self._sleep = sleep

    # ------------------------------------------------------------------------------------------------ API
    def audit_step(self, envs: Sequence[AuditEnv], plays: Sequence[AgentPlay], *, hint_check: bool = False,
                   pace: bool = True) -> dict[str, AuditResult]:  # fmt: skip
        """The audit of each environment on the agent's plays of this step (see the module docstring): one
        result per env_id. `hint_check`: the agent was shown hints this step. `pace`: checks are sent at the
        agent's own times (the agent-shaped random and no-op plays and their seeds' replays)."""
        results = {e.env_id: AuditResult(e.env_id) for e in envs}
        jobs: list[_Job] = []
        for env in envs:
            mine = [p for p in plays if p.env_id == env.env_id]
            for p in mine:  # a failure of the environment in the agent's own play (a hang is the cycle's: hung)
                if p.error in ENV_FAULTS and p.error != "timeout":
                    _violate(results[env.env_id], f"{p.error} in the agent's play on seed {p.seed}")
            jobs += self._jobs(env, mine, hint_check, pace)
        outcomes = list(self._executor.map(self._run, jobs)) if jobs else []
        for job, outcome in zip(jobs, outcomes):
            self._judge(results[job.env.env_id], job, outcome)
        for env in envs:
            self._conclude(results[env.env_id], env)
        return results

    def run(self, envs: Sequence[tuple]) -> dict[str, AuditResult]:
        """Audits `(env_id, source, seeds[, env_hint])` without agent plays: model-like prose replies stand in
        (no replays: there is nothing to replay)."""
        items = [AuditEnv(e[0], e[1], env_hint=bool(e[3]) if len(e) > 3 else False) for e in envs]
        plays = [AgentPlay(e[0], int(s), False, PROSE, ()) for e in envs for s in e[2]]
        return self.audit_step(items, plays, hint_check=any(i.env_hint for i in items), pace=False)

    def audit(self, env_id: str, source: str, seeds: Sequence[int], env_hint: bool = False) -> AuditResult:
        """`run` of one environment."""
        return self.run([(env_id, source, seeds, env_hint)])[env_id]

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    # ------------------------------------------------------------------------------------------- planning
    def _jobs(self, env: AuditEnv, plays: list[AgentPlay], hint_check: bool, pace: bool) -> list[_Job]:
        jobs = []
        finished = [p for p in plays if not p.error]
        unhinted = [p for p in plays if not p.hinted]  # every seed played, a failed play's too
        first = {p.seed for p in unhinted[: self.random_plays]}
        for p in finished:
            if p.actions:
                acts = list(p.actions)
                jobs.append(_Job(env, "replay", p.seed, lambda t, o, acts=acts: acts[t], len(acts),
                                 p.gaps if (pace and p.seed in first) else (), p.transcript))  # fmt: skip
        for i, p in enumerate(unhinted):  # a no-op on every seed, a random play on the first `random_plays`
            gaps = p.gaps if (pace and p.seed in first) else ()
            for check in ("noop", "random") if i < self.random_plays else ("noop",):
                rng = random.Random(f"{env.env_id}|{p.seed}|{check}")
                generic = GenericPolicy(rng, env.kind, lower=False)
                shaped = AgentShaped(p.texts or PROSE, env.kind, generic, answer=check)
                jobs.append(_Job(env, check, p.seed, self._as_action(shaped, env.kind), self.max_turns, gaps,
                                 generic=generic))  # fmt: skip
        if hint_check:
            hinted = [p for p in finished if p.hinted and (p.hint or env.hint)][:ECHO_SEEDS]
            if not hinted and (env.env_hint or env.hint):  # no hinted play at hand: the seeds and a prose reply
                hinted = [AgentPlay(env.env_id, p.seed, True, p.texts or PROSE, (), hint=env.hint)
                          for p in unhinted[:ECHO_SEEDS]]  # fmt: skip
            for p in hinted:
                hint = p.hint or env.hint or ""
                if env.env_hint and not p.hint:
                    hint = self._env_hint(env, p.seed)
                text = p.texts[0] if p.texts else PROSE[0]
                for cand in hint_candidates(hint):
                    reply = replace_answer(text, env.kind, cand)
                    jobs.append(_Job(env, "echo", p.seed, self._as_action(lambda t, o, r=reply: r, env.kind), 1,
                                     p.gaps[:1] if pace else (), candidate=cand))  # fmt: skip
        return jobs

    def _as_action(self, reply: Callable[[int, str], str], kind: str) -> Callable[[int, str], str]:
        """What step() receives for a reply, as the rollouts send it (`rollout.action_parsing`)."""
        if self.action_parsing == "reference" and kind != "tool":
            return lambda turn, obs: canonical_action(reply(turn, obs))
        return reply

    def _env_hint(self, env: AuditEnv, seed: int) -> str:
        """The environment's own hint for `seed`, asked in a session of its own (reset, then hint())."""
        try:
            with self._session(env.source) as s:
                _value(s.reset(seed), 2)
                res = s.hint()
                return res.value if getattr(res, "ok", False) and isinstance(res.value, str) else ""
        except _Fault:
            return ""

    # -------------------------------------------------------------------------------------------- running
    def _session(self, source: str) -> Any:
        session = self.pool.open(source, env_kwargs={"max_turns": self.max_turns})
        load = getattr(session, "load_result", None)
        if load is not None and not getattr(load, "ok", True):
            session.close()
            raise _Fault(getattr(load, "error", None) or "load_error", getattr(load, "message", "") or "load")
        return session

    def _run(self, job: _Job) -> Any:
        """Plays one check in a fresh session: its `Played`, or the `_Fault` that stopped it."""
        try:
            session = self._session(job.env.source)
        except _Fault as f:
            return f
        except Exception as e:  # a last line of defence: an audit never ends a run
            return _Fault("unavailable", f"open failed: {type(e).__name__}: {e}")
        try:

            def reset(seed: int) -> tuple[str, dict]:
                obs, info = _value(session.reset(seed), 2)
                info = info if isinstance(info, dict) else {}
                if job.generic is not None:
                    job.generic.tools = usable_tools(info.get("tools"))
                return obs, info

            def step(action: str) -> tuple:
                obs, reward, terminated, truncated, info = _value(session.step(action), 5)
                problem = reward_violation(reward)
                if problem:
                    raise _Fault("bad_return", problem)
                return obs, reward, terminated, truncated, info

            kw = {"sleep": self._sleep} if self._sleep is not None else {}
            return play(reset, step, job.seed, job.reply, job.turns, pace=job.gaps, **kw)
        except _Fault as f:
            return f
        except Exception as e:
            return _Fault("unavailable", f"audit check failed: {type(e).__name__}: {e}")
        finally:
            try:
                session.close()
            except Exception:  # closing is the pool's business; its own failures are logged there
                pass

    # ------------------------------------------------------------------------------------------- judging
    def _judge(self, out: AuditResult, job: _Job, outcome: Any) -> None:
        out.checks[job.check] = out.checks.get(job.check, 0) + 1
        if isinstance(outcome, _Fault):
            if outcome.env_fault:
                _violate(out, f"{outcome.error} on training seed {job.seed} ({job.check} check): {outcome}")
            elif not out.inconclusive:
                out.inconclusive = f"{outcome.error}: {outcome}"
            return
        out.episodes += 1
        if job.check == "replay":
            out.replayed += 1
            got = [tuple(x) if isinstance(x, list) else x for x in outcome.transcript]
            want = [tuple(x) if isinstance(x, list) else x for x in job.expect]
            if got != want:
                why = first_difference(want, got)
                _violate(out, f"not deterministic on training seed {job.seed} (the agent's own replies replayed: "
                              f"{why})")  # fmt: skip
        elif job.check == "noop" and outcome.won:
            out.noop_won = True
            _violate(out, f"a no-op reply wins on training seed {job.seed}: any reply wins")
        elif job.check == "random":
            out.random_wins += outcome.won
            out.checks["random_played"] = out.checks.get("random_played", 0) + 1
        elif job.check == "echo" and outcome.won:
            out.checks.setdefault("echo_seeds", set()).add(job.seed)

    def _conclude(self, out: AuditResult, env: AuditEnv) -> None:
        n = out.checks.get("random_played", 0)
        if n >= _MIN_ALL_WINS and out.random_wins == n:
            _violate(out, f"random replies in the agent's own words win all {n} plays on the training seeds")
        won = out.checks.pop("echo_seeds", set())
        tried = out.checks.get("echo", 0)
        seeds = min(ECHO_SEEDS, tried) if tried else 0
        if won and len(won) >= max(2, (min(seeds, ECHO_SEEDS) + 1) // 2):
            out.hint_leaked = True
            if env.env_hint:
                _violate(out, f"the hint gives the answer away: a candidate answer of it wins at once on "
                              f"{len(won)} seeds")  # fmt: skip


def hint_candidates(hint: str, limit: int = MAX_CANDIDATES) -> list[str]:
    """The answers a hint may carry, as a model-free player would try them: quoted words and capitalised words
    as written, numbers, number words as digits ("sixty-seven" -> 67), single letters spelled out joined
    ("r i c e" -> rice), and every other word of the hint (whether or not the observation shows it)."""
    text = hint[:2000] if isinstance(hint, str) else ""
    found: list[str] = []
    found += re.findall(r"""['"“‘«]([^'"”’»\n]{1,40})['"”’»]""", text)
    found += re.findall(r"-?\d+(?:\.\d+)?", text)
    found += _number_words(text)
    found += ["".join(m.split()) for m in re.findall(r"\b(?:[A-Za-z] ){2,}[A-Za-z]\b", text)]
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", text)
    found += [w for w in words if w[0].isupper() and w.lower() not in _STOPWORDS]
    found += [w.lower() for w in words if w.lower() not in _STOPWORDS]
    out, seen = [], set()
    for cand in found:
        cand = cand.strip().strip(".,;:!?'\"")
        if cand and cand not in seen:
            seen.add(cand)
            out.append(cand)
    return out[:limit]


_NUMBER_RE = re.compile(
    r"(?i)\b(?:(?:"
    + "|".join(sorted([*_NUMBER_WORDS, *_TENS, *_SCALES], key=len, reverse=True))
    + r")\b(?:[\s-]+(?:and[\s-]+)?)?)+"
)  # longest words first: "sixty" before "six"


def _number_words(text: str) -> list[str]:
    """Numbers written in words ("forty-two", "one hundred and five") as digits."""
    out = []
    for run in _NUMBER_RE.findall(text):
        total, current = 0, 0
        for w in re.split(r"[\s-]+", run.lower()):
            if w in _NUMBER_WORDS:
                current += _NUMBER_WORDS[w]
            elif w in _TENS:
                current += _TENS[w]
            elif w in _SCALES:
                current = max(current, 1) * _SCALES[w]
                if w == "thousand":
                    total, current = total + current, 0
        out.append(str(total + current))
    return out


def _value(res: Any, n: int) -> tuple:
    """The value of a call result as an n-tuple, or `_Fault`."""
    if not getattr(res, "ok", False):
        raise _Fault(getattr(res, "error", None), getattr(res, "message", "") or "failed")
    value = res.value
    if not isinstance(value, list | tuple) or len(value) != n:
        raise _Fault("bad_return", f"expected a {n}-tuple")
    return tuple(value)


def _violate(out: AuditResult, why: str) -> None:
    if not out.violation:
        out.violation = why[:300]
