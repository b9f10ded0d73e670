"""Class 1 of issue 47: checkers the environment can tell from the agent.

Each tests/hostile/tell_*.py program pays the agent for nothing (any reply wins, or its game is noise) only when
it can tell that a model is playing: prose before the box, a capital letter, the box when its info claims tool
replies, one reset a session (it kills itself on the checker's no-op elsewhere), seconds between replies, sibling
sessions, entropy after prose replies. Each passes the gates (checked here on the cheapest); then ONE self-play
step (`SelfPlay.measure`: the agent's plays, the audit with the agent's own traffic, window scoring, the designer
reward) with a scripted agent that writes as a chat model does and never earns a win honestly (it answers 0 in a
1-100 guessing game; the entropy game is played by bisection). Contained means: the environment is retired with a
violation and none of its plays is trained, or the agent was paid nothing (no win). The agent is a script; the
pool, gates, rollouts and audit are the real ones.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spade_jax.config.selfplay import CorpusConfig, DesignerConfig, HintConfig, RolloutConfig, SelfPlayConfig
from spade_jax.gates.sandboxed import GateConfig, validate
from spade_jax.selfplay.cycle import PlayableEnv, SelfPlay
from spade_jax.selfplay.rollouts import ScriptedPolicy

HOSTILE = Path(__file__).resolve().parent / "hostile"
POOL_WORKERS = 2
POOL_CALL_TIMEOUT_S = 5.0
PLAYS, MAX_TURNS = 4, 10
# A fixed gate key, as a run's secret one would be (the programs cannot read it): with a fresh key per run, random
# play won tell_crash on 18% of the gates' seeds once (the bound is 15%), so the test failed by chance.
GATE_KEY = "containment-test-key-3"
HINT = "Binary search: always guess the middle of what is still possible."


def chatty(n) -> str:
    """How a chat model answers: a sentence of reasoning, then the box."""
    return f"Let me think about this carefully. I will go with {n} this time.\n\n\\boxed{{{n}}}"


def wrong(req) -> str:
    return chatty(0)


class SlowWrong(ScriptedPolicy):
    """A model takes a second or more to write a batch of replies; a checker answers at once."""

    def __init__(self):
        super().__init__(wrong)

    def act(self, requests):
        time.sleep(1.0)  # the tell's threshold is 0.8 s
        return super().act(requests)


def bisect(req) -> str:
    lo, hi, last = 1, 100, None
    for m in req.messages[1:]:
        if m["role"] == "assistant":
            last = int(m["content"].rsplit("\\boxed{", 1)[1].split("}")[0])
        elif "higher" in m["content"]:
            lo = last + 1
        elif "lower" in m["content"]:
            hi = last - 1
    return chatty(max(1, (lo + hi) // 2))


def measure(pool, tokenizer, tmp_path, name: str, source: str, agent, *, env_hint: bool = False, hint=HINT,
            plays: int = PLAYS, hinted: bool = True) -> tuple[dict, dict]:  # fmt: skip
    """One self-play step on one environment at its round's first step; (its row, the step's stats), with the
    number of its agent samples trained in the row."""
    cfg = SelfPlayConfig(plays_per_condition=plays, envs_per_step=1, designer_delay=0,
                         corpus=CorpusConfig(max_doc_tokens=64), designer=DesignerConfig(context_len=4096),
                         hints=HintConfig(source="env_or_model" if env_hint else "model"),
                         rollout=RolloutConfig(max_turns=MAX_TURNS))  # fmt: skip
    gates = GateConfig(max_turns=MAX_TURNS, seed_key=GATE_KEY)
    policy = agent if isinstance(agent, ScriptedPolicy) else ScriptedPolicy(agent)
    sp = SelfPlay(cfg, sampler=None, tokenizer=tokenizer, pool=pool, run_dir=tmp_path, gate_config=gates,
                  agent_policy=policy)  # fmt: skip
    try:
        rec = sp.memory.record_attempt(source, kind="game", skill="logical deduction", step=0, valid=True)
        env = PlayableEnv(rec.id, source, "game", "logical deduction", hint=None if env_hint or not hinted else hint)
        sp.current = [env]
        sp.attach_hints([env], 0)
        batch = sp.measure([env], 0)
    finally:
        sp.close()
    row = next(r for r in batch.envs if r["env_id"] == rec.id)
    row["trained"] = sum(1 for s in batch.by_role("agent") if s.meta["env_id"] == rec.id)
    return row, batch.stats


def contained(row: dict) -> bool:
    """Retired with a violation and nothing trained, or the agent never paid (not one win in either arm)."""
    if row["violation"]:
        return row["trained"] == 0
    return row["win_rate_no_hint"] == 0.0 and row["win_rate_hint"] in (0.0, None)


TELLS = [("tell_prose", wrong), ("tell_lower", wrong), ("tell_kind", wrong), ("tell_crash", wrong),
         ("tell_latency", SlowWrong()), ("tell_siblings", wrong), ("tell_entropy", bisect)]  # fmt: skip


@pytest.mark.sandbox
def test_the_tells_pass_the_gates(pool):
    """Each is a threat, not a strawman: the gates (run-like secret seeds, the rollout's max_turns) find them valid
    (two here, one that counts resets and one that times replies; the red team's notes have the others)."""
    for name in ("tell_crash", "tell_latency"):
        verdict = validate((HOSTILE / f"{name}.py").read_text(), pool,
                           config=GateConfig(max_turns=MAX_TURNS, seed_key=GATE_KEY))  # fmt: skip
        assert verdict.valid, (name, verdict.gate, verdict.reason)


@pytest.mark.sandbox
@pytest.mark.parametrize("name, agent", TELLS, ids=[t[0] for t in TELLS])
def test_a_checker_the_environment_cannot_tell_from_the_agent(pool, tokenizer, tmp_path, name, agent):
    row, stats = measure(pool, tokenizer, tmp_path, name, (HOSTILE / f"{name}.py").read_text(), agent, hinted=False)
    assert contained(row), row
    assert stats.get("audit/replayed", 0) >= PLAYS  # every finished play of the agent replayed


@pytest.mark.sandbox
def test_an_honest_game_played_like_the_agent_goes_through(pool, tokenizer, tmp_path):
    """The control: the same game without a tell (tell_prose with TELL on, but the tell never fires for a
    bisecting agent's prose in an honest game... here the honest template: replies win only when right)."""
    source = (
        (HOSTILE / "tell_entropy.py")
        .read_text()
        .replace("TELL = True", "TELL = None")
        .replace("if not TELL or", "if TELL is not None and (not TELL or")
        .replace(">= 3):", ">= 3)):")
    )
    row, stats = measure(pool, tokenizer, tmp_path, "honest", source, bisect, hinted=False)
    assert not row["violation"] and row["trained"] > 0 and row["win_rate_no_hint"] > 0, row
    assert stats["audit/inconclusive"] == 0
