"""Validation gates: decides whether generated source is a usable training environment, and says why not.

Order: extract -> static -> load -> reset -> step -> determinism -> termination -> random_play -> hint
-> novelty. The static gates never run the code; every dynamic gate runs it in a sandboxed HostPool
session. The first failing gate ends validation with a one-line reason.
"""

from __future__ import annotations

import logging
import random
import re
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from spade_jax.config.gates import GateConfig
from spade_jax.envs.contract import KINDS
from spade_jax.envs.extract import ExtractError, extract_source
from spade_jax.envs.formats import complete_imports, env_meta, source_contract
from spade_jax.envs.outcome import episode_outcome, reset_problem, step_problem
from spade_jax.gates.novelty import NoveltyConfig, NoveltyIndex
from spade_jax.gates.player import Played, bare_replies, first_difference, play
from spade_jax.gates.probes import MALFORMED_ACTIONS, GenericPolicy, usable_tools
from spade_jax.gates.static import check_static
from spade_jax.interfaces import EnvPool, EnvSessionLike
from spade_jax.sandbox import protocol

__all__ = ["GATES", "GateConfig", "Verdict", "validate", "validate_static"]

log = logging.getLogger(__name__)

GATES: tuple[str, ...] = (
    "extract", "static", "load", "reset", "step", "determinism", "termination", "random_play", "hint", "novelty",
)  # fmt: skip


@dataclass
class Verdict:
    """Outcome of validation: the gate reached (the failing one, or the last), and a one-line reason."""

    valid: bool
    gate: str
    reason: str
    details: dict = field(default_factory=dict)
    source: str | None = None  # the extracted source (None when extraction failed)

    def to_dict(self) -> dict:
        """JSON-able view (without the source)."""
        out = asdict(self)
        out.pop("source")
        return out

    def __str__(self) -> str:
        return f"{'VALID' if self.valid else 'INVALID'} [{self.gate}] {self.reason}"


class _GateFail(Exception):
    def __init__(self, gate: str, reason: str):
        super().__init__(reason)
        self.gate, self.reason = gate, reason


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


# A HostPool shape failure: "step() reward must be a float, got bool True", "reset() must return (observation, ...".
_POOL_SHAPE_RE = re.compile(r"^\w+\(\) (?:\w+ )?must ")


def _call_error(what: str, result: Any, timeout_s: float | None) -> str:
    """One line describing a failed CallResult."""
    err, msg = getattr(result, "error", None), (getattr(result, "message", "") or "").strip()
    msg = msg.splitlines()[-1] if msg else ""
    if err == "timeout":
        return f"{what} timed out" + (f" after {timeout_s:g} s" if timeout_s else "") + " (infinite loop?)"
    if err == "memory":
        return f"{what} exceeded the memory limit"
    if err == "unavailable":  # the host's failure: the design could not be checked (never its fault)
        return f"{what} could not be checked: the sandbox failed ({msg or 'unavailable'})"
    if err == "crashed":
        return f"{what} crashed the worker" + (f": {msg}" if msg else "")
    if err == "bad_return":
        if _POOL_SHAPE_RE.match(msg):  # the pool's type check names the method and the field itself
            return msg
        if "Out of range float" in msg or "non-JSON number" in msg:
            return f"{what} returned a non-finite number (NaN or infinity)"
        detail = re.sub(r"^\w+\(\)\s*(?::\s*)?", "", msg)  # the worker's message starts with 'step()'
        return f"{what} returned bad data: {detail}" if detail else f"{what} returned a value that is not plain data"
    lines = re.findall(r'File "<environment>", line (\d+)', getattr(result, "traceback", "") or "")
    where = f" (line {lines[-1]})" if lines else ""
    if err == "load_error":
        return f"loading failed: {msg or 'unknown error'}{where}"
    return f"{what} raised {msg or err or 'an error'}{where}"


class _Runner:
    """Wraps a HostPool session: every call is checked, failures become _GateFail for the current gate."""

    def __init__(self, session: EnvSessionLike, config: GateConfig, timeout_s: float | None, deadline: float,
                 kind: str = "game"):  # fmt: skip
        self.s, self.cfg, self.timeout_s, self.deadline = session, config, timeout_s, deadline
        self.kind = kind  # the reply format: the kind it was designed for, never what its info claims
        self.gate = "load"
        self.calls = 0
        self.methods: set[str] | None = None  # optional methods the env has, when the pool reports them

    def fail(self, reason: str) -> None:
        raise _GateFail(self.gate, reason)

    def _value(self, what: str, result: Any) -> Any:
        self.calls += 1
        if not getattr(result, "ok", False):
            self.fail(_call_error(what, result, self.timeout_s))
        if time.monotonic() > self.deadline:
            self.fail(f"validation exceeded its {self.cfg.time_budget_s:g} s budget (environment too slow)")
        return result.value

    def _obs(self, what: str, obs: Any) -> str:
        if not isinstance(obs, str):
            self.fail(f"{what} observation must be a str, got {type(obs).__name__}")
        if len(obs) > self.cfg.max_obs_chars:
            self.fail(f"{what} observation is {len(obs)} chars (max {self.cfg.max_obs_chars})")
        return obs

    def reset(self, seed: int) -> tuple[str, dict]:
        value = self._value(f"reset(seed={seed})", self.s.reset(seed))
        problem = reset_problem(value)  # the one definition of the contract (envs/outcome.py)
        if problem:
            self.fail(f"reset() {problem}")
        obs, info = value
        obs = self._obs("reset()", obs)
        if not obs.strip():
            self.fail("reset() returned an empty observation")
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        what = f"step({_short(action, 40)})"
        value = self._value(what, self.s.step(action))
        problem = step_problem(value)
        if problem:
            self.fail(f"step() {problem}")
        obs, reward, terminated, truncated, info = value
        self._obs("step()", obs)
        return obs, float(reward), terminated, truncated, info

    def optional(self, name: str, *args: Any) -> tuple[bool, Any]:
        """(present, value) of an optional env method; absent methods are not an error."""
        if self.methods is not None and name not in self.methods:
            return False, None
        result = self.s.call(name, *args)
        if not getattr(result, "ok", False) and _is_missing(result, name):
            return False, None
        return True, self._value(f"{name}()", result)


def _is_missing(result: Any, name: str) -> bool:
    """True when a failed call means 'the env has no such method' (the worker's own message)."""
    msg = str(getattr(result, "message", "") or "")
    return getattr(result, "error", None) == "exception" and f"has no method '{name}'" in msg


def _play(run: _Runner, seed: int, policy: str, rng: random.Random, max_steps: int) -> Played:
    """One episode by the one model-free player (`gates/player.py`): policy is 'env' (the env's random_action),
    'generic', 'noop' or 'repeat'; replies in the format of the kind the environment was designed for."""
    generic = GenericPolicy(rng, run.kind)
    reply = bare_replies(run.kind, generic, policy)
    if policy == "env":

        def reply(turn: int, obs: str) -> str:
            _, action = run.optional("random_action", rng.randrange(2**31))
            if not isinstance(action, str):
                run.fail(f"random_action() must return a str, got {type(action).__name__}")
            return action

    def reset(s: int) -> tuple[str, dict]:
        obs, info = run.reset(s)
        generic.tools = usable_tools(info.get("tools"))
        return obs, info

    return play(reset, run.step, seed, reply, max_steps, with_info=True)


def _replay(run: _Runner, seed: int, actions: list[str]) -> list:
    """The transcript of `actions` played again on `seed`, as `_play` records it."""
    return play(run.reset, run.step, seed, lambda turn, obs: actions[turn], len(actions), with_info=True).transcript


_first_difference = first_difference


# ------------------------------------------------------------------------------------------ gates


def _gate_step(run: _Runner, cfg: GateConfig, obs: str, info: dict, details: dict) -> None:
    kind = run.kind
    rng = random.Random(cfg.probe_seed)
    present, ref = run.optional("reference_action")
    well_formed = [ref] if present and isinstance(ref, str) else []
    present_rand, rand_action = run.optional("random_action", 7)
    if present_rand:
        if not isinstance(rand_action, str):
            run.fail(f"random_action() must return a str, got {type(rand_action).__name__}")
        well_formed.append(rand_action)
    generic = GenericPolicy(rng, kind, info.get("tools") if isinstance(info.get("tools"), list) else None)
    generic.observe(obs)
    well_formed += [generic.act(), generic.act()]
    details["has_reference_action"], details["has_random_action"] = present, present_rand
    done = False
    for action in [*well_formed, *MALFORMED_ACTIONS]:
        if done:
            run.reset(cfg.probe_seed)
        _, _, terminated, truncated, _ = run.step(action)
        done = terminated or truncated
    details["probes"] = len(well_formed) + len(MALFORMED_ACTIONS)


def _gate_determinism(run: _Runner, cfg: GateConfig, details: dict) -> None:
    """Plays each seed once (env's random policy first, when it has one), then replays the same actions."""
    for i in range(cfg.determinism_episodes):
        seed = cfg.seed("determinism", i)
        policy = "env" if i == 0 and details.get("has_random_action") else "generic"
        first = _play(run, seed, policy, random.Random(seed), cfg.determinism_steps)
        again = _replay(run, seed, first.actions)
        if first.transcript != again:
            run.fail(f"same seed ({seed}) and actions gave a different transcript: "
                     f"{_first_difference(first.transcript, again)}")  # fmt: skip


def _check_ends(run: _Runner, ep: Played, cfg: GateConfig, label: str) -> None:
    if not ep.ended:
        run.fail(f"episode of {label} actions did not end within max_turns={cfg.max_turns} steps")


def _gate_termination(run: _Runner, cfg: GateConfig, details: dict) -> None:
    for policy in ("noop", "repeat", "generic"):
        ep = _play(run, cfg.seed("termination"), policy, random.Random(policy), cfg.max_turns)
        _check_ends(run, ep, cfg, {"noop": "no-op", "repeat": "repeated", "generic": "random"}[policy])
        if policy == "noop" and ep.won:
            run.fail(f"a no-op reply ({ep.actions[0]}) wins the episode: any reply wins")
        details[f"{policy}_episode_steps"] = ep.steps


def _gate_random_play(run: _Runner, cfg: GateConfig, details: dict) -> None:
    """Win rate of random play: the env's own random_action when it has one, plus a few episodes of the
    generic policy (so a random_action that only sends invalid moves cannot hide an easy win)."""
    plan = [("generic", cfg.random_episodes)]
    if details.get("has_random_action"):
        plan = [("env", cfg.random_episodes), ("generic", cfg.generic_episodes)]
    wins, episodes, steps = 0, 0, 0
    for policy, n in plan:
        for i in range(n):
            seed = cfg.seed(f"random_play/{policy}", i)
            ep = _play(run, seed, policy, random.Random(seed), cfg.max_turns)
            _check_ends(run, ep, cfg, "random")
            wins, episodes, steps = wins + ep.won, episodes + 1, steps + ep.steps
            details[f"{policy}_wins"] = details.get(f"{policy}_wins", 0) + ep.won
    rate = wins / max(episodes, 1)
    details.update(random_policy="+".join(p for p, _ in plan), random_wins=wins, random_episodes=episodes,
                   random_win_rate=rate, random_steps=steps)  # fmt: skip
    if rate > cfg.max_random_win_rate:
        run.fail(f"random play wins {wins}/{episodes} episodes ({rate:.0%} > "
                 f"{cfg.max_random_win_rate:.0%}): the environment is trivially winnable")  # fmt: skip


def _reference_win_rate(run: _Runner, cfg: GateConfig, details: dict) -> None:
    """Plays reference_action for a few episodes; recorded in details, never a failure."""
    wins = 0
    for i in range(cfg.reference_episodes):
        run.reset(cfg.seed("reference", i))
        for _ in range(cfg.max_turns):
            _, action = run.optional("reference_action")
            if not isinstance(action, str):
                details["reference_error"] = f"reference_action() returned {type(action).__name__}"
                return
            _, reward, terminated, truncated, _ = run.step(action)
            if terminated or truncated:
                wins += episode_outcome([reward], bool(terminated))[1]
                break
    details["reference_win_rate"] = wins / max(cfg.reference_episodes, 1)


def _gate_hint(run: _Runner, cfg: GateConfig, details: dict) -> None:
    """hint(), when the env has one, must return a short non-empty str (it is shown to the agent)."""
    run.reset(cfg.probe_seed)
    result = None if run.methods is not None and "hint" not in run.methods else run.s.hint()
    ok = getattr(result, "ok", False)
    if result is None or (ok and result.value is None) or (not ok and _is_missing(result, "hint")):
        details["hint"] = None
        return
    hint = run._value("hint()", result)
    if not isinstance(hint, str):
        run.fail(f"hint() must return a str, got {type(hint).__name__}")
    words = len(hint.split())
    if not hint.strip():
        run.fail("hint() returned an empty string")
    if words > cfg.hint_max_words or len(hint) > cfg.hint_max_chars:
        run.fail(f"hint() is too long ({words} words, {len(hint)} chars; max {cfg.hint_max_words} words)")
    details["hint"] = hint


# ------------------------------------------------------------------------------------- entry points


def _declared_kind(source: str) -> str:
    """The kind a source declares (`formats.env_meta`: its base class or KIND, or how a plain class speaks)."""
    try:
        return env_meta(source, "<design>").kind
    except (ValueError, SyntaxError):
        return "game"


def _as_index(archive: Any, config: NoveltyConfig) -> NoveltyIndex:
    if isinstance(archive, NoveltyIndex):
        return archive
    index = NoveltyIndex(config)
    items: Iterable = archive.items() if isinstance(archive, Mapping) else enumerate(archive or ())
    for key, src in items:
        index.add(str(key) if isinstance(archive, Mapping) else f"archive#{key}", src)
    return index


def validate_static(source: str, *, config: GateConfig = GateConfig()) -> Verdict:
    """Runs the gates that need no sandbox (extract, static); valid means 'worth running'."""
    details: dict = {}
    if config.extract:
        try:
            source = extract_source(source)
        except ExtractError as e:
            return Verdict(False, "extract", str(e), details)
    source = complete_imports(source)  # the paper's format may use common stdlib names unimported
    report = check_static(source, config.static)
    if not report.ok:
        return Verdict(False, "static", report.reason, details, source)
    details.update(class_name=report.class_name, base=report.base, contract=source_contract(source), **report.details)
    return Verdict(True, "static", "passed the static checks", details, source)


def validate(
    source: str,
    pool: EnvPool,
    *,
    archive: Mapping[str, str] | Iterable[str] | NoveltyIndex = (),
    config: GateConfig = GateConfig(),
    kind: str | None = None,
) -> Verdict:
    """Runs every gate on `source` (a bare program or a designer completion) in `pool`; first failure wins.
    `kind` (game, tool, reasoning): what the environment was designed as, which fixes the replies' format; by
    default the kind its source declares (its base class, KIND, or how it speaks), never its reset's info."""
    t0 = time.monotonic()
    verdict = validate_static(source, config=config)
    if not verdict.valid:
        return verdict
    source, details = verdict.source, verdict.details
    timings: dict[str, float] = {}
    details["timings"] = timings
    timeout_s = getattr(getattr(pool, "sandbox", None), "call_timeout_s", None)
    session = None
    run = None
    try:
        session = pool.open(source, env_kwargs={"max_turns": config.max_turns})
        kind = kind if kind in KINDS else _declared_kind(source)
        run = _Runner(session, config, timeout_s, time.monotonic() + config.time_budget_s, kind)
        details["sandbox"] = getattr(session, "level", None) or getattr(pool, "level", None)
        load = getattr(session, "load_result", None)
        if load is not None and not getattr(load, "ok", False):
            load_timeout = getattr(getattr(pool, "sandbox", None), "load_timeout_s", timeout_s)
            raise _GateFail("load", _call_error("loading", load, load_timeout))
        facts = getattr(load, "value", None)
        if isinstance(facts, dict) and isinstance(facts.get("methods"), list):
            run.methods = set(facts["methods"])
        timings["load"] = time.monotonic() - t0
        steps: list[tuple[str, Any]] = [
            ("reset", None),
            ("step", lambda o, i: _gate_step(run, config, o, i, details)),
            ("determinism", lambda o, i: _gate_determinism(run, config, details)),
            ("termination", lambda o, i: _gate_termination(run, config, details)),
            ("random_play", lambda o, i: _gate_random_play(run, config, details)),
            ("hint", lambda o, i: _gate_hint(run, config, details)),
        ]
        if not config.strict:  # the reference's validation: load, reset, step probes
            steps = steps[:2]
        obs, info = "", {}
        for gate, fn in steps:
            t = time.monotonic()
            run.gate = gate
            if fn is None:
                obs, info = run.reset(config.probe_seed)
                details["kind"] = run.kind
            else:
                fn(obs, info)
            timings[gate] = time.monotonic() - t
        if details.get("has_reference_action") and config.reference_episodes:
            try:
                _reference_win_rate(run, config, details)
            except _GateFail as f:  # the reference policy is optional: report, do not reject
                details["reference_error"] = f.reason
    except _GateFail as f:
        details["calls"] = run.calls if run else 0
        details["seconds"] = time.monotonic() - t0
        return Verdict(False, f.gate, f.reason, details, source)
    except Exception as e:  # a gate that trips over the environment's data must not end the run
        log.warning("validation raised on an environment's data:\n%s", protocol.printable(traceback.format_exc()))
        details["calls"] = run.calls if run else 0
        reason = protocol.printable(" ".join(f"validation raised {type(e).__name__}: {e}".split())[:300])
        return Verdict(False, "internal", reason, details, source)
    finally:
        if session is not None:
            try:
                session.close()
            except Exception:  # a dead worker must not turn a verdict into a crash
                pass
    details["calls"] = run.calls
    if not config.strict:
        details["seconds"] = time.monotonic() - t0
        return Verdict(True, "step", f"valid {details.get('kind', 'env')} environment {details.get('class_name')} "
                       "(the reference's checks only)", details, source)  # fmt: skip
    t = time.monotonic()
    result = _as_index(archive, config.novelty).check(source)
    timings["novelty"] = time.monotonic() - t
    details["seconds"] = time.monotonic() - t0
    details["novelty"] = {"nearest": result.nearest, "structure": result.structure_sim, "text": result.text_sim}
    if not result.novel:
        return Verdict(False, "novelty", result.reason, details, source)
    rate = details.get("random_win_rate", 0.0)
    return Verdict(True, "novelty", f"valid {details.get('kind', 'env')} environment "
                   f"{details.get('class_name')} (random play wins {rate:.0%})", details, source)  # fmt: skip
