"""Batched multi-turn rollouts through the real host pool, with scripted policies (model-free).

The scripted hint reader proves the regret measurement independently of any model: with the environment's
hint (binary search) it always wins HigherLower; without it, it guesses at random. The expected unhinted
wins are recomputed by replaying the same guesses on the environment class in-process.
"""

from __future__ import annotations

import random
import re

import pytest

from spade_jax.config.selfplay import RewardConfig, RolloutConfig
from spade_jax.envs.base import extract_boxed
from spade_jax.envs.contract import contract_examples
from spade_jax.selfplay.regret import designer_reward, measure_regret, plateau
from spade_jax.selfplay.rollouts import EpisodeSpec, RolloutEngine, ScriptedPolicy, TurnRequest

HIGHER_LOWER = contract_examples()["game"]

SLOW_STEP = """
from spade_jax.envs.base import GameEnv


class Trap(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "trap"

    def setup(self):
        return "Say \\\\boxed{ok} to win, anything else loses. \\\\boxed{hang} and \\\\boxed{boom} are traps."

    def play(self, command):
        if command == "hang":
            while True:
                pass
        if command == "boom":
            raise RuntimeError("kaboom")
        if command == "ok":
            return self.win()
        return "Try again."
"""


POOL_CALL_TIMEOUT_S = 2.0  # for the `pool` fixture in conftest.py


def _range(messages: list[dict]) -> tuple[int, int]:
    """The still-possible range [lo, hi] after the guesses and answers so far."""
    lo, hi, last = 1, 100, None
    for msg in messages[1:]:
        if msg["role"] == "assistant":
            last = int(extract_boxed(msg["content"]))
        elif "go higher" in msg["content"]:
            lo = last + 1
        elif "go lower" in msg["content"]:
            hi = last - 1
    return lo, hi


def _guess(messages: list[dict], seed: int, turn: int) -> str:
    """Binary search when the first observation carries the hint; a uniform guess in the range otherwise."""
    lo, hi = _range(messages)
    first = messages[0]["content"]
    if "HINT:" in first and "binary search" in first.lower():
        return f"The middle of [{lo}, {hi}] is \\boxed{{{(lo + hi) // 2}}}"
    return f"Maybe \\boxed{{{random.Random(seed * 1000 + turn).randint(lo, hi)}}}"


def hint_reader(req: TurnRequest) -> str:
    return _guess(req.messages, req.spec.seed, req.turn)


def _replay(seed: int, max_turns: int, hint: str | None) -> bool:
    """Independent reference: the same policy against the env class in-process (no pool, no engine)."""
    namespace: dict = {}
    exec(compile(HIGHER_LOWER, "higher_lower", "exec"), namespace)
    env = namespace["HigherLower"](max_turns=max_turns)
    obs, _ = env.reset(seed)
    messages = [{"role": "user", "content": obs + (f"\n\nHINT: {hint}" if hint else "")}]
    for turn in range(max_turns):
        action = _guess(messages, seed, turn)
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return bool(info["won"])
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
    return False


def test_scripted_hint_reader_gives_expected_regret(pool, tokenizer):
    k, max_turns = 8, 10
    specs = [EpisodeSpec("higher_lower", HIGHER_LOWER, 100 + i, cond, env_hint=True)
             for cond in ("hint", "no_hint") for i in range(k)]  # fmt: skip
    sizes: list[int] = []

    class Recording(ScriptedPolicy):
        def act(self, requests):
            sizes.append(len(requests))
            return super().act(requests)

    engine = RolloutEngine(pool, Recording(hint_reader), tokenizer, RolloutConfig(max_turns=max_turns))
    result = engine.run(specs)
    engine.close()
    assert not any(e.discarded for e in result.episodes)
    # 16 episodes on the pool's places (workers x sessions each): as many live at a time as there are places,
    # waiting ones join as others finish
    assert max(sizes) == min(len(specs), pool.capacity) and sum(sizes) == sum(e.turns for e in result.episodes)
    hinted = [e for e in result.episodes if e.condition == "hint"]
    plain = [e for e in result.episodes if e.condition == "no_hint"]
    assert all("HINT: Binary search" in e.messages[0]["content"] for e in hinted)
    assert not any("HINT" in e.messages[0]["content"] for e in plain)
    assert all(e.won and e.episode_return == 1.0 for e in hinted)  # binary search finds 1..100 in <= 7 guesses
    expected_wins = [_replay(100 + i, max_turns, None) for i in range(k)]
    assert [e.won for e in plain] == expected_wins
    assert all(_replay(100 + i, max_turns, hinted[0].hint) for i in range(k))
    assert 0 < sum(expected_wins) < k  # random play sometimes wins: the comparison is not trivial
    st = measure_regret([e.episode_return for e in hinted], [e.episode_return for e in plain], expected_plays=k)
    wr = sum(expected_wins) / k
    assert st.regret == pytest.approx(1.0 - wr) and st.regret >= 0.5
    assert designer_reward(st, RewardConfig()) == pytest.approx(0.4 * 1.0 + 0.6 * plateau(wr))
    stats = result.stats()
    assert stats["return_hint"] == 1.0 and stats["win_rate_no_hint"] == pytest.approx(wr)


def test_tokens_masks_and_chat_template_agree(pool, tokenizer):
    specs = [EpisodeSpec("higher_lower", HIGHER_LOWER, 7, "hint", env_hint=True),
             EpisodeSpec("higher_lower", HIGHER_LOWER, 8, "no_hint")]  # fmt: skip
    engine = RolloutEngine(pool, ScriptedPolicy(hint_reader), tokenizer, RolloutConfig(max_turns=4))
    result = engine.run(specs)
    engine.close()
    eos = tokenizer.decode([tokenizer.eos_ids[0]])
    for ep in result.episodes:
        n = len(ep.completion_ids)
        assert len(ep.completion_mask) == len(ep.logprobs) == len(ep.raw_logprobs) == n
        # the token sequence is exactly the chat template applied to the conversation
        rendered = tokenizer.apply_chat_template(ep.messages, add_generation_prompt=False)
        assert tokenizer.decode(ep.prompt_ids + ep.completion_ids) + "\n" == rendered
        # mask 1 exactly on the agent's own tokens: each turn decodes to its reply plus the end token
        replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        assert len(ep.turn_spans) == len(replies) == ep.turns
        for (a, b), reply in zip(ep.turn_spans, replies):
            assert all(ep.completion_mask[a:b]) and tokenizer.decode(ep.completion_ids[a:b]) == reply + eos
        assert sum(ep.completion_mask) == sum(b - a for a, b in ep.turn_spans)
        assert ep.episode_return == max(-1.0, min(1.0, sum(ep.rewards)))
    assert result.episodes[0].won and result.episodes[0].end_reason == "terminated"


def test_timeout_crash_and_context_overflow(pool, tokenizer):
    def trap_policy(req: TurnRequest) -> str:
        return {0: "\\boxed{hang}", 1: "\\boxed{boom}", 2: "\\boxed{wait}", 3: "no box at all"}[req.spec.seed]

    specs = [EpisodeSpec("trap", SLOW_STEP, s, "no_hint") for s in range(4)]
    cfg = RolloutConfig(max_turns=50, max_episode_tokens=160, min_turn_tokens=8)
    engine = RolloutEngine(pool, ScriptedPolicy(trap_policy), tokenizer, cfg)
    result = engine.run(specs)
    engine.close()
    hang, boom, wait, nobox = result.episodes
    # a hang is the environment's fault: return 0 (not terminated); the self-play step never trains on it
    assert hang.end_reason == "timeout" and hang.episode_return == 0.0 and not hang.terminated
    assert boom.discarded and boom.error == "exception" and "kaboom" in boom.messages[-1]["content"]
    assert result.failures["timeout"] == 1 and result.failures["exception"] == 1
    for ep in (wait, nobox):  # never-ending episodes stop cleanly at the token budget
        assert ep.end_reason == "context" and not ep.discarded and ep.episode_return == 0.0
        assert len(ep.prompt_ids) + len(ep.completion_ids) <= 160
        assert ep.messages[-1]["role"] == "assistant"
    assert nobox.format_errors == nobox.turns >= 2 and wait.format_errors == 0
    # the pool still serves episodes after a hung and a crashed worker
    again = RolloutEngine(pool, ScriptedPolicy(lambda r: "\\boxed{ok}"), tokenizer, RolloutConfig(max_turns=3))
    res2 = again.run([EpisodeSpec("trap", SLOW_STEP, 9, "no_hint")])
    again.close()
    assert res2.episodes[0].won


def test_context_limit_of_the_policy_ends_cleanly(pool, tokenizer):
    # a policy reply cut off by the sampler's context ("context" finish) ends the episode without a step
    from spade_jax.selfplay.rollouts import TurnReply

    class CutOff:
        def act(self, requests):
            return [TurnReply("\\boxed{5", finish_reason="context") for _ in requests]

    engine = RolloutEngine(pool, CutOff(), tokenizer, RolloutConfig(max_turns=5))
    result = engine.run([EpisodeSpec("higher_lower", HIGHER_LOWER, 1, "no_hint")])
    engine.close()
    ep = result.episodes[0]
    assert ep.end_reason == "context" and ep.turns == 1 and ep.rewards == [] and not ep.discarded
    assert re.search(r"\\boxed\{5$", ep.messages[-1]["content"])
    # a first observation that does not fit the budget at all: discarded (nothing to learn), counted
    tight = RolloutEngine(pool, CutOff(), tokenizer, RolloutConfig(max_turns=5, max_episode_tokens=40))
    res = tight.run([EpisodeSpec("higher_lower", HIGHER_LOWER, 1, "no_hint")])
    tight.close()
    assert res.episodes[0].discarded and res.episodes[0].error == "context" and res.failures["context"] == 1
