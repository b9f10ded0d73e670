"""The reference's signal against ours (issue 45, points 9, 10 and 13, and part B): how an episode ends, what the
compact filter trains, what a hung or broken environment's design earns, and which gates a design must pass.
The expected outcomes are the reference's rules (orchestrator.py play_game_async, synthetic_game_env.py
SyntheticGameEnv.step / _validate_game_execution, delayed_env_rewards.py, spade_rollout.py), worked out by hand.
Environments run for real in the sandbox pool; the agent is scripted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_jax.config.gates import GateConfig
from spade_jax.config.selfplay import RewardConfig, RolloutConfig
from spade_jax.gates.sandboxed import validate
from spade_jax.selfplay.batch import agent_samples, designer_samples
from spade_jax.selfplay.episodes import EndReason, Episode, EpisodeSpec
from spade_jax.selfplay.regret import LearningProgress, plateau
from spade_jax.selfplay.rollouts import RolloutEngine, TurnReply
from spade_jax.selfplay.window import DesignSample, EnvWindow, Round, RoundScore, score_round

POOL_WORKERS = 2
BROKEN = Path(__file__).parent / "broken_envs"

COUNTER = """
class CounterEnv:
    def __init__(self, max_turns=3, crash_at=0):
        self.max_turns, self.crash_at = max_turns, crash_at

    def reset(self, seed=None):
        self.turn = 0
        return "Count up: answer \\\\boxed{n}.", {}

    def step(self, action):
        self.turn += 1
        if self.turn == self.crash_at:
            raise RuntimeError("the designer's bug")
        return f"turn {self.turn}", 0.1, False, self.turn >= self.max_turns, {}
"""


class _Replies:
    """Answers every turn with a boxed number; `finish` is the sampler's finish reason it reports."""

    def __init__(self, finish: str = "eos"):
        self.finish = finish

    def act(self, requests):
        return [TurnReply(text=f"\\boxed{{{r.turn}}}", finish_reason=self.finish) for r in requests]


def _play(pool, tokenizer, source: str, policy, condition: str = "no_hint", **cfg) -> Episode:
    engine = RolloutEngine(pool, policy, tokenizer, RolloutConfig(max_turns=6, **cfg))
    try:
        return engine.run([EpisodeSpec("e", source, 1, condition, hint="count")]).episodes[0]
    finally:
        engine.close()


# ------------------------------------------------------------------------------------ point 10: episode ends


def test_episode_ends_like_the_reference(pool, tokenizer):
    # a reply cut at its token limit: the reference ends the (unhinted) play there, not stepped, return 0, trained
    ep = _play(pool, tokenizer, COUNTER, _Replies("length"), no_eos="end")
    assert ep.end_reason == EndReason.LENGTH and ep.turns == 1 and ep.rewards == [] and not ep.discarded
    assert [m["role"] for m in ep.messages] == ["user", "assistant"] and ep.episode_return == 0.0
    assert len(agent_samples([ep], 0)) == 1
    # its hinted plays do not check: the reply is stepped; ours ("step") steps every reply
    hinted = _play(pool, tokenizer, COUNTER, _Replies("length"), condition="hint", no_eos="end")
    assert hinted.turns == 6 and hinted.end_reason == EndReason.TRUNCATED  # the game was built with max_turns=6
    assert _play(pool, tokenizer, COUNTER, _Replies("length")).turns == 6

    # step() raising: -1, terminated, trained (the reference); discarded, never trained (ours)
    crash = COUNTER.replace("crash_at=0", "crash_at=2")
    ep = _play(pool, tokenizer, crash, _Replies(), step_error="terminal_penalty")
    assert (ep.end_reason, ep.terminated, ep.episode_return, ep.discarded) == (EndReason.STEP_ERROR, True, -1.0, False)
    assert ep.rewards == [0.1, -1.0] and [s.reward for s in agent_samples([ep], 0)] == [-1.0]
    ours = _play(pool, tokenizer, crash, _Replies())
    assert ours.discarded and agent_samples([ours], 0) == []

    # the game's own max_turns (3) under respect_game_max_turns; ours passes rollout.max_turns (6) to it
    assert _play(pool, tokenizer, COUNTER, _Replies(), respect_game_max_turns=True).turns == 3


# ------------------------------------------------------------------------------------ point 13: compact filter


def test_compact_filter_zeroes_truncated():
    """--spade-compact-filter: every TRUNCATED sample (no EOS, context, the game's truncation, the turn cap)
    keeps its place in the batch with an all-zero loss mask; terminated ones (a crashing step's -1 included)
    are untouched."""
    eps = []
    for reason in (EndReason.TERMINATED, EndReason.TRUNCATED, EndReason.MAX_TURNS, EndReason.CONTEXT,
                   EndReason.LENGTH, EndReason.STEP_ERROR):  # fmt: skip
        ep = Episode(EpisodeSpec("e", "src", len(eps)), [1, 2], [3, 4, 5], [1, 0, 1], [-0.1] * 3, [-0.1] * 3)
        ep.end_reason = reason
        eps.append(ep)
    masks = [s.completion_mask for s in agent_samples(eps, 0, compact_filter=True)]
    assert masks == [[1, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 1]]
    assert all(s.completion_mask == [1, 0, 1] for s in agent_samples(eps, 0))


# ------------------------------------------------------------------------------ point 9: negative blends


def test_hung_and_broken_environments_under_each_signal():
    """The reference's blend has no timeout penalty: a hung environment's design earns the blend of the plays it
    has (here 0 wins in 2 plays: plateau(0) = 0, no hint: regret 0); ours charges -0.5. A design whose reward is
    negative is dropped from the reference's batch (and its centring), counted."""
    rnd = Round(0, plays=2, hint_plays=2)
    for env_id, timeouts, violations in (("hung", 1, []), ("broken", 0, ["reward 3.0 out of range"]), ("ok", 0, [])):
        env = EnvWindow(env_id, "game", "x", "missing", timeouts=timeouts, violations=violations)
        for r in (0.0, 1.0 if env_id == "ok" else 0.0):
            env.add_play(0, r, r == 1.0)
        rnd.envs[env_id] = env
    cfg = RewardConfig()
    strict = score_round(rnd, cfg, LearningProgress(), expected_plays=2, min_plays_fraction=0.5)
    ref = score_round(rnd, cfg, LearningProgress(), expected_plays=2, min_plays_fraction=0.5, strict=False)
    assert {k: v.reward for k, v in strict.items()} == {"hung": -0.5, "broken": -0.5, "ok": 0.6 * plateau(0.5)}
    assert {k: v.reward for k, v in ref.items()} == pytest.approx({"hung": 0.0, "broken": 0.0, "ok": 0.6})

    rnd.samples = [DesignSample([1], [2], [0.0], [0.0], env_id, "game", "x", True) for env_id in ("hung", "ok")]
    kept, masked = designer_samples(rnd, strict, 0, drop_negative=True)
    assert [s.meta["record_id"] for s in kept] == ["ok"] and masked == 1
    kept, masked = designer_samples(rnd, strict, 0)
    assert [s.reward for s in kept] == [-0.5, pytest.approx(0.6 * plateau(0.5))] and masked == 0
    assert designer_samples(rnd, {"hung": RoundScore(ref["hung"].stats, 0.0, "missing", 1)}, 0)[0][1].reward == 0.0


# ------------------------------------------------------------------------------------------- part B: gates


@pytest.mark.parametrize(
    ("name", "strict_gate"),
    [("never_terminates.py", "termination"), ("coin_flip.py", "random_play"),
     ("nondeterministic_step.py", "determinism"), ("import_os.py", "static"), ("step_raises.py", "step")],
)  # fmt: skip
def test_reference_validation_is_load_reset_step(pool, name, strict_gate):
    """_validate_game_execution loads, resets, steps three times and resets: a game that never ends, that a coin
    flip wins or that is not deterministic passes it; what our safety refuses (imports, a crashing step) fails
    under either signal."""
    source = (BROKEN / name).read_text()
    strict = validate(source, pool, config=GateConfig(max_turns=8))
    loose = validate(source, pool, config=GateConfig(max_turns=8, strict=False))
    assert not strict.valid and strict.gate == strict_gate
    assert loose.valid == (strict_gate not in ("static", "step")), loose
