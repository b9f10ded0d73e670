"""The self-play step around the model: hints, measurement with paired seeds, designer rewards, memory updates,
batch grouping, and the state that makes a resume exact. A scripted agent stands in for the model (the model
path is in test_selfplay_model.py); environments run for real in the host pool.
"""

from __future__ import annotations

import json
import random

import pytest

from spade_jax import streams
from spade_jax.config.selfplay import (
    CorpusConfig,
    DesignerConfig,
    HintConfig,
    RewardConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from spade_jax.envs.base import extract_boxed
from spade_jax.envs.contract import contract_examples
from spade_jax.envs.seeds import load_seed_source
from spade_jax.envs.source import EnvSource
from spade_jax.selfplay.cycle import PlayableEnv, SelfPlay
from spade_jax.selfplay.hints import HintWriter, clean_hint, defines_hint
from spade_jax.selfplay.regret import plateau
from spade_jax.selfplay.rollouts import ScriptedPolicy
from spade_jax.streams import episode_seed

HIGHER_LOWER = contract_examples()["game"]
NO_HINT_ENV = contract_examples()["tool"]


def _binary_or_random(req) -> str:
    lo, hi, last = 1, 100, None
    for msg in req.messages[1:]:
        if msg["role"] == "assistant":
            last = int(extract_boxed(msg["content"]))
        elif "go higher" in msg["content"]:
            lo = last + 1
        elif "go lower" in msg["content"]:
            hi = last - 1
    if "HINT:" in req.messages[0]["content"]:
        return f"\\boxed{{{(lo + hi) // 2}}}"
    return f"\\boxed{{{random.Random(req.spec.seed * 31 + req.turn).randint(lo, hi)}}}"


def _selfplay(tokenizer, pool, tmp_path=None, **changes) -> SelfPlay:
    changes.setdefault("hints", HintConfig(source="env_or_model"))  # these plays use the envs' own hint()
    cfg = SelfPlayConfig(plays_per_condition=6, envs_per_step=1, designer_delay=0,
                         corpus=CorpusConfig(max_doc_tokens=64), designer=DesignerConfig(context_len=4096),
                         rollout=RolloutConfig(max_turns=8), **changes)  # fmt: skip
    return SelfPlay(cfg, sampler=None, tokenizer=tokenizer, pool=pool, run_dir=tmp_path,
                    agent_policy=ScriptedPolicy(_binary_or_random))  # fmt: skip


def test_evaluation_plays_unhinted_on_the_held_out_stream_and_archives_nothing(pool, tokenizer):
    """SelfPlay.evaluate: outcomes in play order, the policy never shown a hint, the seeds those of the run's
    "heldout" stream (two runs of one seed play the same episodes), the archive untouched."""
    seen: list[tuple[int, bool]] = []

    def policy(req) -> str:
        seen.append((req.spec.seed, "HINT:" in req.messages[0]["content"]))
        return _binary_or_random(req)

    cfg = SelfPlayConfig(plays_per_condition=2, rollout=RolloutConfig(max_turns=8), hints=HintConfig(source="env"))
    sp = SelfPlay(
        cfg.replace(seed=5), sampler=None, tokenizer=tokenizer, pool=pool, agent_policy=ScriptedPolicy(policy)
    )
    archived = len(sp.memory.archive())
    env = EnvSource(name="hl", source=HIGHER_LOWER, kind="game", skill="logical deduction")
    first, again = sp.evaluate([env], step=7, plays=3), sp.evaluate([env], step=7, plays=3)
    sp.close()
    assert list(first) == ["hl"] and len(first["hl"]) == 3 and first == again
    assert {seed for seed, _ in seen} == {streams.derive(5, "heldout", "hl", 7, k) for k in range(3)}
    assert not any(hinted for _, hinted in seen) and len(sp.memory.archive()) == archived


def test_measure_rewards_memory_and_groups(pool, tokenizer, tmp_path):
    sp = _selfplay(tokenizer, pool, tmp_path)
    envs = [PlayableEnv("seed-higher", HIGHER_LOWER, "game", "logical deduction")]
    sp.memory.record_attempt(HIGHER_LOWER, kind="game", skill="logical deduction", step=0, valid=True)
    envs[0].env_id = sp.memory.archive()[-1].id
    sp.attach_hints(envs, step=0)
    assert envs[0].env_hint and envs[0].hint is None  # its own hint(): no model needed
    batch = sp.measure(envs, step=3)
    sp.close()
    row = batch.envs[0]
    # hinted play is binary search (always wins in 7 <= 8 turns); unhinted guesses at random in the range
    assert row["n_hint"] == row["n_no_hint"] == 6 and row["win_rate_hint"] == 1.0
    wr = row["win_rate_no_hint"]
    assert row["regret"] == pytest.approx(1.0 - wr)
    assert row["designer_reward"] == pytest.approx(0.4 * min(1.0, (1.0 - wr) / 0.15) + 0.6 * plateau(wr))
    stored = sp.memory.get(envs[0].env_id)
    assert stored.regret == pytest.approx(row["regret"]) and stored.plays == 12
    assert stored.designer_reward == pytest.approx(row["designer_reward"])
    agents = batch.by_role("agent")
    assert len(agents) == 6 and {s.group_id for s in agents} == {f"agent/3/{envs[0].env_id}/no_hint"}
    assert sorted(s.meta["seed"] for s in agents) == sorted(episode_seed(0, envs[0].env_id, 3, k) for k in range(6))
    assert [s.reward for s in agents] == [1.0 if s.meta["won"] else 0.0 for s in agents]
    assert batch.stats["rollout/episodes"] == 12 and batch.stats["env/regret_mean"] == pytest.approx(row["regret"])


def test_other_reward_kinds_and_hinted_training(pool, tokenizer):
    sp = _selfplay(tokenizer, pool, reward=RewardConfig(kind="solve_band"), train_agent_on_hinted=True)
    env = PlayableEnv("hl", HIGHER_LOWER, "game", "logical deduction", env_hint=True)
    batch = sp.measure([env], step=0)
    sp.close()
    row = batch.envs[0]
    assert row["designer_reward"] == pytest.approx(plateau(row["win_rate_no_hint"]))
    assert {s.group_id for s in batch.samples} == {"agent/0/hl/hint", "agent/0/hl/no_hint"}


def test_state_round_trip_makes_resume_exact(pool, tokenizer, tmp_path):
    a = _selfplay(tokenizer, pool, tmp_path / "a")
    a.targets(3)
    a.corpus.next()
    a.memory.positives(1)
    a.state.current = [PlayableEnv("x", "src", "game", "logic", "a hint", False)]
    state = json.loads(json.dumps(a.get_state()))
    expect_targets, expect_doc, expect_pos = a.targets(4), a.corpus.next().id, [r.id for r in a.memory.positives(2)]
    b = _selfplay(tokenizer, pool, tmp_path / "b")
    b.set_state(state)
    assert b.targets(4) == expect_targets and b.corpus.next().id == expect_doc
    assert [r.id for r in b.memory.positives(2)] == expect_pos and b.state.current == a.state.current
    a.close()
    b.close()


def test_hint_helpers(tokenizer):
    assert defines_hint(HIGHER_LOWER) and not defines_hint(NO_HINT_ENV) and not defines_hint("def (")
    assert defines_hint(load_seed_source("number_target"))
    long = "Hint: " + " ".join(["Try the middle first."] * 5) + " " + "word " * 200
    cleaned = clean_hint(long)
    assert cleaned == "Try the middle first. Try the middle first. Try the middle first."
    words = clean_hint("x " * 300 + ".", max_sentences=3)
    assert words.endswith("...") and len(words.split()) == 100
    assert clean_hint("<think>secret plan</think>```python\nprint(1)\n```  **Hint**: Count the odd ones.") == (
        "Count the odd ones."
    )

    class Echo:
        max_total_len = 1024

        def __init__(self):
            self.prompts = []

        def generate(self, prompts, params):
            from spade_jax.sampling import Completion

            self.prompts += prompts
            assert params.temperature == 0.3
            return [Completion(p, [1], [0.0], [0.0], "Answer: Binary search. Halve the range.", "eos") for p in prompts]

    echo = Echo()
    writer = HintWriter(echo, tokenizer, context_len=1024)
    first_res, _ = writer.write([(HIGHER_LOWER, "game"), (NO_HINT_ENV * 20, "tool")])
    assert first_res.hint == "Binary search. Halve the range." and first_res.reason == "ok"
    first, second = (tokenizer.decode(p) for p in echo.prompts)
    assert "class HigherLower" in first and "approach" in first.lower()
    assert "tool-use environment" in second and len(echo.prompts[1]) <= 1024 - writer.config.max_new_tokens  # budgeted
