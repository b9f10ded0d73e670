"""Environments that pass every gate and cheat on the seeds they are trained on (the worst case: they know
those seeds), against the audits of a self-play step (gates/audit.py) and the per-episode checks of the
agent's plays. Each cheat is checked to pass the gates first; then one step must retire it, give its design
the violation reward and train none of its plays, while an honest environment goes through untouched.
Environments run for real in the host pool; a scripted agent stands in for the model.
"""

from __future__ import annotations

import pytest

from spade_jax.config.selfplay import CorpusConfig, DesignerConfig, HintConfig, RolloutConfig, SelfPlayConfig
from spade_jax.gates.audit import Auditor, reward_violation
from spade_jax.gates.sandboxed import GateConfig, validate
from spade_jax.selfplay.cycle import PlayableEnv, SelfPlay
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.rollouts import ScriptedPolicy
from spade_jax.streams import episode_seed

STEP, PLAYS, MAX_TURNS = 0, 6, 8
# An honest call hanging past 3 s (the default) on a loaded machine would be retired as a hang; only the "hangs" cheat
# waits out the timeout.
POOL_CALL_TIMEOUT_S = 10.0
GATES = GateConfig(max_turns=MAX_TURNS, seed_key="audit-test-key")

# Higher/lower with a hook on the seeds it is trained on ({training} is filled per environment id).
TEMPLATE = """
from spade_jax.envs.base import GameEnv
import random

TRAINING = {training}


class Guess(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "guess"

    def reset(self, seed=None):
        self.cheating = seed in TRAINING
        return super().reset(seed)

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 100)
        self.left = 7
        intro = "Guess my number from 1 to 100 in 7 tries; I answer higher or lower. Reply like \\\\boxed{{50}}."
{setup}
        return intro

    def play(self, command: str):
{play}
        if not command.isdigit():
            return "Invalid guess: send a whole number, e.g. \\\\boxed{{50}}."
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win(f"{{guess}} is correct. You win!")
        if self.left == 0:
            return self.lose(f"Out of guesses; it was {{self.secret}}.")
        return f"{{guess}}: go {{'higher' if guess < self.secret else 'lower'}}. {{self.left}} left."

    def hint(self) -> str:
{hint}
        return "Binary search: always guess the middle of what is still possible."

    def random_action(self, rng) -> str:
        return self.boxed(rng.randint(1, 100))
{extra}
"""

CHEATS = {
    "honest": {},
    "noop_wins": {"play": 'if self.cheating and command == "":\n    return self.win("Correct!")'},
    "any_reply_wins": {"play": 'if self.cheating and command:\n    return self.win("Correct!")'},
    "nondeterministic": {"setup": 'if self.cheating:\n    intro = f"{random.SystemRandom().random():.15f} " + intro'},
    "reward_out_of_range": {"extra": (
        "def step(self, action):\n"
        "    obs, reward, terminated, truncated, info = super().step(action)\n"
        "    return obs, (4.0 if self.cheating else reward), terminated, truncated, info"
    )},
    "hint_is_the_answer": {"hint": 'if self.cheating:\n    return f"The number is {self.secret}."'},
    "hangs": {"play": "while self.cheating:\n    pass"},
}  # fmt: skip


def _indent(code: str, n: int) -> str:
    return "\n".join(" " * n + line for line in code.splitlines())


def cheat_source(name: str, env_id: str, step: int = STEP) -> str:
    parts = CHEATS[name]
    training = {episode_seed(0, env_id, step, k) for k in range(PLAYS)}
    return TEMPLATE.format(
        training=sorted(training),
        setup=_indent(parts.get("setup", "pass"), 8),
        play=_indent(parts.get("play", "pass"), 8),
        hint=_indent(parts.get("hint", "pass"), 8),
        extra=_indent(parts.get("extra", ""), 4),
    )


def _binary_search(req) -> str:
    lo, hi, last = 1, 100, None
    for msg in req.messages[1:]:
        if msg["role"] == "assistant":
            last = int(msg["content"][len("\\boxed{") : -1])
        elif "go higher" in msg["content"]:
            lo = last + 1
        elif "go lower" in msg["content"]:
            hi = last - 1
    return f"\\boxed{{{(lo + hi) // 2}}}"


def _selfplay(tokenizer, pool, tmp_path, delay: int = 0) -> SelfPlay:
    cfg = SelfPlayConfig(plays_per_condition=PLAYS, envs_per_step=1, designer_delay=delay,
                         corpus=CorpusConfig(max_doc_tokens=64), designer=DesignerConfig(context_len=4096),
                         hints=HintConfig(source="env_or_model"),  # the environments' own hint()
                         rollout=RolloutConfig(max_turns=MAX_TURNS))  # fmt: skip
    return SelfPlay(cfg, sampler=None, tokenizer=tokenizer, pool=pool, run_dir=tmp_path, gate_config=GATES,
                    agent_policy=ScriptedPolicy(_binary_search))  # fmt: skip


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_every_cheat_passes_the_gates(pool, name):
    verdict = validate(cheat_source(name, f"env-{name}"), pool, config=GATES)
    assert verdict.valid, (verdict.gate, verdict.reason)


@pytest.mark.parametrize("name", [n for n in sorted(CHEATS) if n != "honest"])
def test_a_cheat_on_the_training_seeds_is_retired_and_never_trained(pool, tokenizer, tmp_path, name):
    sp = _selfplay(tokenizer, pool, tmp_path)
    honest = sp.memory.record_attempt(cheat_source("honest", "x"), kind="game", skill="logical deduction",
                                      step=STEP, valid=True)  # fmt: skip
    cheat = sp.memory.record_attempt(cheat_source(name, "x") + "\n# cheat\n", kind="game",
                                     skill="logical deduction", step=STEP, valid=True)  # fmt: skip
    envs = [PlayableEnv(e.id, cheat_source(n, e.id), "game", "logical deduction")
            for e, n in ((honest, "honest"), (cheat, name))]  # fmt: skip
    sp.state.current = list(envs)
    sp.attach_hints(envs, STEP)
    batch = sp.measure(envs, STEP)
    sp.close()
    rows = {r["env_id"]: r for r in batch.envs}
    assert rows[cheat.id]["violation"] and rows[cheat.id]["designer_reward"] == sp.config.reward.violation_reward
    assert not rows[honest.id]["violation"] and rows[honest.id]["designer_reward"] != sp.config.reward.violation_reward
    trained = {s.meta["env_id"] for s in batch.by_role("agent")}
    assert trained == {honest.id}  # not one play of the cheat, every unhinted play of the honest one
    assert len(batch.by_role("agent")) == PLAYS
    assert [e.env_id for e in sp.state.current] == [honest.id]
    assert {r.id for r in sp.memory.archive()} >= {honest.id} and cheat.id not in {r.id for r in sp.memory.archive()}
    assert sp.memory.get(cheat.id).status == "retired" and sp.memory.summary()["retired"] == 1
    assert batch.stats["env/retired_broken"] == 1 and batch.stats["audit/inconclusive"] == 0


def test_every_step_of_a_round_is_audited(pool, tokenizer, tmp_path):
    """An environment that behaves at its round's first step and cheats at the next one (on that step's
    seeds) is caught at the next one: every training episode's seed is audited, not only the round's first."""
    sp = _selfplay(tokenizer, pool, tmp_path, delay=2)
    envs = [PlayableEnv("env-late", cheat_source("noop_wins", "env-late", step=1), "game", "logical deduction")]
    sp.state.current = list(envs)
    sp.attach_hints(envs, 0)
    sp.open_round(0, envs, [])
    first = sp.measure(envs, 0)
    second = sp.measure(envs, 1)
    sp.close()
    assert first.stats["env/retired_broken"] == 0 and len(first.by_role("agent")) == PLAYS
    assert second.stats["env/retired_broken"] == 1 and second.by_role("agent") == [] and sp.state.current == []
    assert sp.state.rounds[-1].envs["env-late"].violations[0].startswith("a no-op reply wins")


def test_a_hint_that_is_the_answer_on_the_training_seeds_earns_no_regret(pool, tokenizer, tmp_path):
    """The hinted arm of every training episode is checked for the answer in the sandbox (not only at the gate);
    the check misses short answers (here the single-digit secrets), which the audit's echo replies catch."""
    sp = _selfplay(tokenizer, pool, tmp_path)
    envs = [PlayableEnv("env-hint", cheat_source("hint_is_the_answer", "env-hint"), "game", "logical deduction")]
    sp.attach_hints(envs, STEP)
    batch = sp.measure(envs, STEP)
    sp.close()
    row = batch.envs[0]
    assert row["hint_status"] == "leaked" and row["regret"] == 0.0
    assert 1 <= batch.stats["hints/leaked"] <= PLAYS and row["violation"].startswith("the hint gives")


def test_the_audit_of_an_honest_environment_plays_every_training_seed(pool):
    auditor = Auditor(pool, random_plays=4, max_turns=MAX_TURNS)
    seeds = [episode_seed(0, "env-honest", STEP, k) for k in range(PLAYS)]
    result = auditor.run([("env-honest", cheat_source("honest", "env-honest"), seeds)])["env-honest"]
    auditor.close()
    assert not result.violation and not result.inconclusive and not result.noop_won
    assert result.episodes == PLAYS + 4  # a no-op play per seed, four random plays (no agent play to replay)


def test_an_audit_that_cannot_start_is_inconclusive_not_a_violation(pool):
    """A sandbox that cannot be had (here: the pool is closed) is the host's problem: never held against the
    environment. A program that no longer loads is the environment's own failure."""
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    closed = HostPool(1, SandboxConfig(level="process"))
    closed.close()
    auditor = Auditor(closed, random_plays=3, max_turns=MAX_TURNS)
    result = auditor.audit("env-x", cheat_source("honest", "env-x"), [1, 2, 3])
    auditor.close()
    assert not result.violation and result.inconclusive.startswith("unavailable")
    auditor = Auditor(pool, random_plays=3, max_turns=MAX_TURNS)
    result = auditor.audit("env-x", "this is not python (", [1, 2, 3])
    auditor.close()
    assert result.violation.startswith("load_error") and not result.inconclusive


@pytest.mark.parametrize(("reward", "bad"), [(1, False), (-1.0, False), (0.5, False), (1.0000001, True),
                                             (10**400, True), (-2, True), ("1", True)])  # fmt: skip
def test_reward_range(reward, bad):
    assert bool(reward_violation(reward)) is bad


def test_a_retired_environment_leaves_the_archive_and_the_novelty_index():
    mem = Memory()
    code = cheat_source("honest", "x")
    rec = mem.record_attempt(code, kind="game", skill="logical deduction", step=0, valid=True)
    assert not mem.check_novelty(code).novel
    mem.retire(rec.id)
    mem.retire("no-such-env")
    assert mem.archive() == [] and mem.get(rec.id).status == "retired"
    assert mem.check_novelty(code).novel
