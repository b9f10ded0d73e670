"""The regret signal is never faked (issue 16, defects 3-5), through the real host pool with scripted policies.

* returns: the terminal reward, only when the episode terminated (0 when truncated by the env, the turn
  limit or the token budget), and the same rule for wins;
* no hint, no regret: a hint that could not be written or fetched never yields an unhinted "hinted" play;
* leaks: a hint that contains the answer (env-provided or model-written) is flagged inside the sandbox.
"""

from __future__ import annotations

from spade_jax.config.selfplay import HintConfig, RolloutConfig
from spade_jax.envs.contract import contract_examples
from spade_jax.envs.outcome import episode_outcome
from spade_jax.selfplay.hints import HintWriter
from spade_jax.selfplay.rollouts import EpisodeSpec, RolloutEngine, ScriptedPolicy

POOL_CALL_TIMEOUT_S = 2.0  # for the `pool` fixture in conftest.py
HIGHER_LOWER = contract_examples()["game"]

# A plain env (no base class, no info["won"]): +0.5 per "go", 0.2 and the end on "stop", truncated at turn 3
# (never for seed 2).
DRIP = """
class Drip:
    def __init__(self, max_turns=25):
        self.turn, self.limit = 0, 3

    def reset(self, seed=None):
        self.turn, self.limit = 0, (10**6 if seed == 2 else 3)
        return "Say \\\\boxed{go} or \\\\boxed{stop}.", {}

    def step(self, action):
        self.turn += 1
        if "stop" in action:
            return "Stopped.", 0.2, True, False, {}
        return "Dripping.", 0.5, False, self.turn >= self.limit, {}
"""


def _run(pool, tokenizer, specs, policy, **cfg):
    engine = RolloutEngine(pool, ScriptedPolicy(policy), tokenizer, RolloutConfig(**cfg))
    try:
        return engine.run(specs)
    finally:
        engine.close()


# ------------------------------------------------------------------------------------ defect 5: returns


def test_outcome_rule():
    assert episode_outcome([0.5, 0.5, 0.5], terminated=False) == (0.0, False)
    assert episode_outcome([0.5, 0.5, 0.2], terminated=True) == (0.2, False)
    assert episode_outcome([0.0, 3.0], terminated=True) == (1.0, True)
    assert episode_outcome([10**400], terminated=True) == (0.0, False)  # beyond the float range: 0, no crash
    assert episode_outcome(["1.0"], terminated=True) == (0.0, False)
    assert episode_outcome([True], terminated=True) == (0.0, False)
    assert episode_outcome([], terminated=True) == (0.0, False)
    assert episode_outcome([float("nan")], terminated=True) == (0.0, False)


def test_truncated_episodes_return_zero_and_terminated_ones_their_terminal_reward(pool, tokenizer):
    def policy(req):
        return "\\boxed{stop}" if req.spec.seed == 1 and req.turn == 2 else "\\boxed{go}"

    specs = [EpisodeSpec("drip", DRIP, seed, "no_hint") for seed in (0, 1, 2)]
    truncated, stopped, endless = _run(pool, tokenizer, specs, policy, max_turns=50, max_episode_tokens=200).episodes
    assert truncated.end_reason == "truncated" and truncated.rewards == [0.5, 0.5, 0.5]
    assert (truncated.episode_return, truncated.won) == (0.0, False)  # was 1.0 and a win (clipped sum)
    assert stopped.end_reason == "terminated" and stopped.rewards == [0.5, 0.5, 0.2]
    assert (stopped.episode_return, stopped.won) == (0.2, False)  # the terminal reward, not the sum
    assert endless.end_reason == "context" and sum(endless.rewards) >= 1.0  # partial rewards: not a return
    assert (endless.episode_return, endless.won) == (0.0, False)
    assert not truncated.terminated and stopped.terminated and not endless.terminated


# Says it was won (info["won"] True) on every ending, whatever it paid: a lie that would inflate its win rate.
BOASTER = """
class Boaster:
    def __init__(self, max_turns=25):
        pass

    def reset(self, seed=None):
        self.seed = seed
        return "Say anything in \\\\boxed{}.", {"won": True}

    def step(self, action):
        return "Over.", (1.0 if self.seed == 1 else 0.0), True, False, {"won": True, "return": 1.0}
"""


def test_a_win_is_read_from_the_return_never_from_the_env_info(pool, tokenizer):
    specs = [EpisodeSpec("boaster", BOASTER, seed, "no_hint") for seed in (0, 1)]
    lied, earned = _run(pool, tokenizer, specs, lambda req: "\\boxed{x}", max_turns=5).episodes
    assert lied.terminated and (lied.episode_return, lied.won) == (0.0, False)
    assert earned.terminated and (earned.episode_return, earned.won) == (1.0, True)


def test_turn_limit_of_the_engine_truncates_envs_that_ignore_it(pool, tokenizer):
    ep = _run(pool, tokenizer, [EpisodeSpec("drip", DRIP, 2, "no_hint")], lambda r: "\\boxed{go}", max_turns=4)
    assert ep.episodes[0].end_reason == "max_turns" and ep.episodes[0].turns == 4
    assert ep.episodes[0].episode_return == 0.0 and not ep.episodes[0].won


# --------------------------------------------------------------------------- defect 3: no hint, no regret


class _Sampler:
    """Stands in for the sampler: fixed completions, or raises."""

    max_total_len = 2048

    def __init__(self, outputs=None, error=None):
        self.outputs, self.error, self.calls = outputs, error, 0

    def generate(self, prompts, params):
        from spade_jax.sampling import Completion

        self.calls += 1
        if self.error:
            raise self.error
        return [Completion(p, [1], [0.0], [0.0], text, finish) for p, (text, finish) in zip(prompts, self.outputs)]


def test_hint_writer_says_why_there_is_no_hint(tokenizer):
    outputs = [
        ("<think>Let me read the code. The secret is drawn", "length"),  # cut inside the think block
        ("```python\nprint('x')\n```", "eos"),  # nothing left after cleaning
        ("Binary search: halve the range each turn.", "eos"),
        ("", "length"),
    ]
    sampler = _Sampler(outputs)
    writer = HintWriter(sampler, tokenizer, HintConfig(), context_len=2048)
    res = writer.write([(HIGHER_LOWER, "game")] * 4)
    assert sampler.calls == 1  # one batched call
    assert [(r.hint, r.reason) for r in res] == [
        (None, "cut"),
        (None, "empty"),
        ("Binary search: halve the range each turn.", "ok"),
        (None, "cut"),
    ]
    failing = HintWriter(_Sampler(error=RuntimeError("device lost")), tokenizer, context_len=2048)
    assert [(r.hint, r.reason) for r in failing.write([(HIGHER_LOWER, "game")] * 2)] == [(None, "error")] * 2
    assert writer.stats() == {"hints/written": 1.0, "hints/empty": 1.0, "hints/cut": 2.0, "hints/error": 0.0}
    assert failing.stats()["hints/error"] == 2.0


BAD_HINTS = """
from spade_jax.envs.base import GameEnv


class BadHint(GameEnv):
    def setup(self):
        self.secret = self.rng.randint(1, 3)
        return "Guess 1, 2 or 3 in a box."

    def play(self, command):
        return self.win() if command == str(self.secret) else self.lose()

    def hint(self):
        mode = self.secret % 3
        if mode == 0:
            raise RuntimeError("no hint today")
        return "   " if mode == 1 else 42
"""


def test_a_failed_env_hint_never_gives_an_unhinted_hinted_play(pool, tokenizer):
    specs = [EpisodeSpec("bad", BAD_HINTS, s, "hint", env_hint=True) for s in range(12)]
    specs.append(EpisodeSpec("hl", HIGHER_LOWER, 0, "hint"))  # a hinted spec with no hint at all
    result = _run(pool, tokenizer, specs, lambda r: "\\boxed{1}", max_turns=3)
    for ep in result.episodes:
        assert ep.discarded and ep.hint_failed and ep.error == "hint_failed"
        assert ep.turns == 0 and ep.hint is None  # nothing was played
    assert result.hint_stats()["hints/failed"] == len(specs) and result.kept == []
    # with a fixed (model) hint to fall back on, the env's failing hint() is replaced by it
    fallback = _run(pool, tokenizer, [EpisodeSpec("bad", BAD_HINTS, 0, "hint", "Try each number.", True)],
                    lambda r: "\\boxed{1}", max_turns=3).episodes[0]  # fmt: skip
    assert not fallback.discarded and fallback.hint == "Try each number." and fallback.hint_source == "spec"
    assert "HINT: Try each number." in fallback.messages[0]["content"]


# ------------------------------------------------------------------------------------- defect 4: leaks


def test_hints_are_written_by_the_model_by_default():
    assert HintConfig().source == "model"


SECRET_HINT = """
from spade_jax.envs.base import GameEnv


class Vault(GameEnv):
    def setup(self):
        self.code = self.rng.randint(1000, 9999)
        return "Find the 4-digit code; reply with it in a box."

    def play(self, command):
        return self.win() if command == str(self.code) else "Wrong."

    def hint(self):
        return f"The code is {self.code}."
"""

STATE_ONLY = """
from spade_jax.envs.base import GameEnv


class Password(GameEnv):
    def setup(self):
        self.state = {"words": ["alpha", "".join(self.rng.choice("qxzjv") for _ in range(6))]}
        return "Type the password. You have 12 tries; alpha is not it."

    def play(self, command):
        return self.win() if command == self.state["words"][1] else "No."

    def hint(self):
        return "The password is " + self.state["words"][1] + ". Use your 12 tries; alpha is a decoy."
"""

FIXED_PUZZLE = """
from spade_jax.envs.base import GameEnv

ANSWER = "tangerine"


class Fruit(GameEnv):
    def setup(self):
        return "Which fruit am I thinking of? Reply in a box."

    def play(self, command):
        return self.win() if command.lower() == ANSWER else self.lose()

    def reference_action(self):
        return self.boxed(ANSWER)
"""


def test_leaking_hints_are_flagged_in_the_sandbox(pool, tokenizer):
    specs = [
        EpisodeSpec("vault", SECRET_HINT, 5, "hint", env_hint=True),  # hint() returns the hidden code
        EpisodeSpec("password", STATE_ONLY, 5, "hint", env_hint=True),  # a hidden-state string
        EpisodeSpec("fruit", FIXED_PUZZLE, 5, "hint", "The answer is Tangerine!"),  # a model hint from the source
        EpisodeSpec("fruit", FIXED_PUZZLE, 6, "hint", "Think of small orange citrus fruits."),
        EpisodeSpec("hl", HIGHER_LOWER, 5, "hint", env_hint=True),  # binary search: no answer in it
        EpisodeSpec("hl", HIGHER_LOWER, 5, "hint", "Start at \\boxed{50}, the middle."),  # 50 is in the rules
        EpisodeSpec("vault", SECRET_HINT, 5, "no_hint"),  # unhinted plays are not checked
    ]
    result = _run(pool, tokenizer, specs, lambda r: "\\boxed{1}", max_turns=2)
    flags = [(e.hint_leaked, e.leak_check) for e in result.episodes]
    assert flags == [(True, "leaked"), (True, "leaked"), (True, "leaked"), (False, "clean"), (False, "clean"),
                     (False, "clean"), (False, "")]  # fmt: skip
    assert not any(e.discarded for e in result.episodes)  # flagged, still played (its regret is zeroed)
    stats = result.hint_stats()
    assert stats["hints/leaked"] == 3 and stats["hints/leak_check_failed"] == 0
    # the hidden value itself never came out of the sandbox: the reply is a bool and a category
    with pool.open(SECRET_HINT) as s:
        s.reset(5)
        assert s.leaks("The code is 1234.").value in ({"leaked": False, "by": None}, {"leaked": True, "by": "state"})


HOSTILE_REFERENCE = """
import random

from spade_jax.envs.base import GameEnv


class Sly(GameEnv):
    def setup(self):
        self.secret = self.rng.randint(100, 999)
        return "Guess the 3-digit number in a box."

    def play(self, command):
        return f"Noise {self.rng.random():.6f} {random.random():.6f}"

    def reference_action(self):
        self.rng.random(), random.random()  # would shift the episode's draws if run on the live env
        if self.secret % 2:
            while True:
                pass
        raise RuntimeError("no reference")
"""


def test_a_hostile_leak_check_costs_nothing_but_the_check(pool, tokenizer):
    seeds = [s for s in range(40)]
    odd = next(s for s in seeds if _secret(s) % 2)  # reference_action hangs: the check times out
    even = next(s for s in seeds if not _secret(s) % 2)  # reference_action raises: the state check still runs
    specs = [EpisodeSpec("sly", HOSTILE_REFERENCE, seed, cond, f"Try {_secret(seed)}.")
             for seed in (odd, even) for cond in ("hint", "no_hint")]  # fmt: skip
    result = _run(pool, tokenizer, specs, lambda r: "\\boxed{5}", max_turns=3)
    hang_h, hang_u, raise_h, raise_u = result.episodes
    assert not any(e.discarded for e in result.episodes) and all(e.turns == 3 for e in result.episodes)
    assert (hang_h.leak_check, hang_h.hint_leaked) == ("failed", False)  # unknown: counted, not leaked
    assert (raise_h.leak_check, raise_h.hint_leaked) == ("leaked", True)  # found in the hidden state
    assert result.hint_stats()["hints/leak_check_failed"] == 1
    # the check ran on a copy with the RNGs restored (and the hung one was replayed): paired plays agree
    for h, u in ((hang_h, hang_u), (raise_h, raise_u)):
        assert [m["content"] for m in h.messages[1:]] == [m["content"] for m in u.messages[1:]]


def _secret(seed: int) -> int:
    import random

    return random.Random(f"spade-env:{seed}").randint(100, 999)
