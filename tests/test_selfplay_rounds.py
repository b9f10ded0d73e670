"""The designer's learning signal over design rounds (issue 16, defects 1, 2, 6 and 9): skills dealt round-robin
so designs have peers to be centred against, designs trained `designer_delay` steps later on the reward of
their whole window, hangs charged to the designer and never to the agent, learning progress updated before
it scores. A replaying generator stands in for the designer model and scripted policies for the agent; the
environments, gates and hints run for real in the sandbox pool. Expected rewards are recomputed here from
the recorded plays with the paper's formula, not read back from the code under test.
"""

from __future__ import annotations

import pytest
from players import ReplayDesigner, bisect_or_guess

from spade_jax.config.selfplay import (
    CorpusConfig,
    DesignerConfig,
    HintConfig,
    MemoryConfig,
    RewardConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from spade_jax.envs.contract import contract_examples
from spade_jax.envs.seeds import load_seed_source
from spade_jax.run.learn import BatchRule, to_train_samples
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.selfplay.cycle import PlayableEnv, SelfPlay
from spade_jax.selfplay.regret import plateau
from spade_jax.selfplay.rollouts import ScriptedPolicy
from spade_jax.trajectory import DESIGNER, Sample

POOL_WORKERS = 4
POOL_CALL_TIMEOUT_S = 2.0

HIGHER_LOWER = contract_examples()["game"]
NUMBER_TARGET = load_seed_source("number_target")
HANGS = """from spade_jax.envs.base import GameEnv


class Hangs(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"

    def setup(self) -> str:
        self.n = self.rng.randint(1, 9)
        return "Say a digit in a box, e.g. \\\\boxed{3}."

    def play(self, command: str):
        while True:  # the designer's bug: step() never returns
            pass

    def hint(self) -> str:
        return "Think before you answer."
"""


def _config(**changes) -> SelfPlayConfig:
    base = dict(
        plays_per_condition=3, envs_per_step=2, skills=("logical deduction",), train_agent_on_hinted=True,
        corpus=CorpusConfig(max_doc_tokens=64), memory=MemoryConfig(seed_from_library=False, n_positive=0,
        n_negative=0), designer=DesignerConfig(context_len=4096, max_new_tokens=1500, max_resamples=0),
        designer_reward_scale=1.0, hints=HintConfig(source="env_or_model"), rollout=RolloutConfig(max_turns=8),
    )  # fmt: skip
    return SelfPlayConfig(**{**base, **changes})


def _selfplay(tokenizer, pool, cfg: SelfPlayConfig, policy=bisect_or_guess, sources=(HIGHER_LOWER, NUMBER_TARGET)):
    return SelfPlay(cfg, sampler=ReplayDesigner(tokenizer, sources), tokenizer=tokenizer, pool=pool,
                    agent_policy=ScriptedPolicy(policy))  # fmt: skip


def test_skills_are_dealt_round_robin_with_peers():
    """Defect 1: every active skill gets several designs, and the window of skills rotates by round."""
    cfg = SelfPlayConfig(envs_per_step=6, skills=("a", "b", "c", "d", "e", "f"), skills_per_regen=3)
    sp = SelfPlay(cfg, sampler=None, tokenizer=None, pool=None, corpus=None)
    first = [t.skill for t in sp.targets(6)]
    assert first == ["a", "b", "c", "a", "b", "c"]
    sp.state.design_rounds = 1
    assert [t.skill for t in sp.targets(6)] == ["d", "e", "f", "d", "e", "f"]
    # never more active skills than half the designs: a skill alone in its round cannot be centred
    assert [t.skill for t in sp.targets(2)] == ["b", "b"]  # one skill a round, the second round's


def test_designer_samples_of_a_skill_all_carry_signal_and_the_drop_is_counted():
    """Defect 1: designer rewards are centred per (round, skill) and scaled; none with a reward is lost."""

    def design(reward, skill):
        return Sample([1], [2, 3], [1, 1], [-0.1, -0.1], role=DESIGNER, reward=reward,
                      group_id=f"designer/0/game/{skill}")  # fmt: skip

    batch = SelfPlayBatch(designer=(design(0.9, "x"), design(0.3, "x"), design(0.6, "y"), design(0.6, "y")))
    samples, stats = to_train_samples(batch, BatchRule(role_norm="none", designer_scale=32.0))
    assert [s.advantage for s in samples] == pytest.approx([0.3 * 32, -0.3 * 32])
    assert stats["train/designer_samples"] == 2 and stats["train/designer_dropped_frac"] == 0.5  # equal pair


def test_designs_are_trained_after_the_delay_on_their_whole_window(pool, tokenizer):
    """Defect 2: designs made at step 0 are trained at step 0 + delay, with the blend computed over all plays of
    the window (regret from step 0's matched hinted/unhinted plays, the plateau from every unhinted play)."""
    sp = _selfplay(tokenizer, pool, _config(regen_interval=3, designer_delay=3))
    batches = [sp.step(s) for s in range(4)]
    sp.close()
    assert not any(b.by_role("designer") for b in batches[:3])
    designers = batches[3].by_role("designer")
    assert len(designers) == 2 and {d.group_id for d in designers} == {"designer/0/game/logical deduction"}
    assert all(d.meta["round"] == 0 and d.meta["delayed_by"] == 3 for d in designers)
    for d in designers:
        env_id = d.meta["record_id"]
        plays = [s for b in batches[:3] for s in b.by_role("agent") if s.meta["env_id"] == env_id]
        hinted0 = [s.reward for s in plays if s.meta["condition"] == "hint" and s.group_id.startswith("agent/0/")]
        plain0 = [s.reward for s in plays if s.meta["condition"] == "no_hint" and s.group_id.startswith("agent/0/")]
        window = [float(s.meta["won"]) for s in plays if s.meta["condition"] == "no_hint"]
        assert len(hinted0) == len(plain0) == 3 and len(window) == 9
        regret = sum(hinted0) / 3 - sum(plain0) / 3
        win_rate = sum(window) / len(window)
        expected = 0.4 * min(1.0, max(0.0, regret / 0.15)) + 0.6 * plateau(win_rate)
        assert d.reward == pytest.approx(expected)
    # hinted plays only at the round's first step; unhinted ones every step
    assert [sum(s.meta["condition"] == "hint" for s in b.by_role("agent")) for b in batches[:3]] == [6, 0, 0]
    assert batches[3].stats["design/samples_released"] == 2


def test_the_last_step_flushes_open_rounds(pool, tokenizer):
    """Defect 2: at the run's last step the designs still waiting are trained, not lost."""
    sp = _selfplay(tokenizer, pool, _config(regen_interval=4, designer_delay=4))
    first, last = sp.step(0), sp.step(1, final=True)
    sp.close()
    assert not first.by_role("designer") and len(last.by_role("designer")) == 2 and not sp.state.rounds


def test_a_hanging_environment_is_charged_to_its_designer_not_the_agent(pool, tokenizer):
    """Defect 6: a step timeout is the environment's bug: no agent sample, the designer gets the timeout
    reward, the environment is retired."""
    sp = _selfplay(tokenizer, pool, _config(plays_per_condition=2))
    hangs = PlayableEnv("hangs", HANGS, "game", "logical deduction", env_hint=True)
    good = PlayableEnv("good", HIGHER_LOWER, "game", "logical deduction", env_hint=True)
    sp.state.current = [hangs, good]
    batch = sp.measure([hangs, good], step=0)
    sp.close()
    assert all(s.meta["env_id"] == "good" for s in batch.by_role("agent")) and batch.by_role("agent")
    assert all(s.reward >= 0 for s in batch.by_role("agent"))
    rows = {r["env_id"]: r for r in batch.envs}
    assert rows["hangs"]["designer_reward"] == RewardConfig().timeout_reward and rows["hangs"]["timeouts"] > 0
    assert [e.env_id for e in sp.state.current] == ["good"]
    assert batch.stats["rollout/timeouts_discarded"] == 4 and batch.stats["env/retired_hung"] == 1


def test_learning_progress_updates_before_it_scores(pool, tokenizer):
    """Defect 9: the skill's averages take in the window first (gammas 0.98 / 0.85), then score it."""

    def always_bisect(req):  # the perfect player, hinted or not
        return bisect_or_guess(req, always=True)

    cfg = _config(reward=RewardConfig(kind="learning_progress"))
    assert (cfg.reward.lp_gamma_fast, cfg.reward.lp_gamma_slow) == (0.98, 0.85)
    sp = _selfplay(tokenizer, pool, cfg, policy=always_bisect)
    env = PlayableEnv("hl", HIGHER_LOWER, "game", "logical deduction", env_hint=True)
    first = sp.measure([env], step=0).envs[0]
    sp.close()
    assert first["win_rate_no_hint"] == 1.0
    assert first["designer_reward"] == 0.0  # |1.0 - slow|, slow initialised to this window's 1.0
