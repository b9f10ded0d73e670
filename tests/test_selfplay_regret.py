"""Regret and designer rewards against hand-computed values."""

from __future__ import annotations

import pytest

from spade_jax.config.selfplay import RewardConfig
from spade_jax.selfplay.regret import LearningProgress, designer_reward, measure_regret, plateau


@pytest.mark.parametrize(
    "wr, expected",
    [(0.4, 1.0), (0.5, 1.0), (0.6, 1.0), (0.3, 0.6), (0.15, 0.0), (0.0, 0.0), (0.7, 0.6), (0.85, 0.0), (1.0, 0.0),
     (0.25, 0.4), (0.8, 0.2)],
)  # fmt: skip
def test_plateau_by_hand(wr, expected):
    # 1 on [0.4, 0.6]; e.g. 0.3 is 0.1 below 0.4 -> 1 - 0.1/0.25 = 0.6; 0.8 -> 1 - 0.2/0.25 = 0.2
    assert plateau(wr) == pytest.approx(expected)


def test_regret_and_blend_by_hand():
    # 8 hinted plays: 6 wins; 8 unhinted: 3 wins -> regret = 0.75 - 0.375 = 0.375
    hint = [1, 1, 1, 0, 1, 1, 0, 1]
    no_hint = [0, 1, 0, 0, 1, 0, 1, 0]
    st = measure_regret(hint, no_hint, expected_plays=8)
    assert st.measured and st.n_hint == 8 and st.n_no_hint == 8
    assert st.regret == pytest.approx(0.375)
    assert st.win_rate_hint == pytest.approx(0.75) and st.win_rate == pytest.approx(0.375)
    # blend: 0.4 * clip(0.375/0.15, 0, 1) + 0.6 * plateau(0.375) = 0.4 + 0.6 * (1 - 0.025/0.25) = 0.4 + 0.54
    assert designer_reward(st, RewardConfig()) == pytest.approx(0.94)
    assert designer_reward(st, RewardConfig(kind="regret")) == pytest.approx(0.375)
    assert designer_reward(st, RewardConfig(kind="solve_band")) == pytest.approx(0.9)


def test_small_regret_and_negative_regret():
    # regret 0.0625 (hint 9/16, no hint 8/16): 0.4 * 0.0625/0.15 + 0.6 * plateau(0.5) = 0.1666.. + 0.6
    st = measure_regret([1] * 9 + [0] * 7, [1] * 8 + [0] * 8)
    assert st.regret == pytest.approx(0.0625)
    assert designer_reward(st) == pytest.approx(0.4 * 0.0625 / 0.15 + 0.6)
    # negative regret is floored at 0 in both the blend and pure regret; too-easy env: plateau(0.9) = 0
    st = measure_regret([1, 1, 1, 0, 1, 1, 1, 1, 1, 1], [1] * 9 + [0] * 0 + [1])
    assert st.regret == pytest.approx(-0.1) and st.win_rate == 1.0
    assert designer_reward(st) == 0.0
    assert designer_reward(st, RewardConfig(kind="regret")) == 0.0


def test_invalid_and_unmeasured_give_zero():
    st = measure_regret([1, 1, 1, 1], [0, 0, 0, 1])
    assert designer_reward(st, valid=False) == 0.0
    assert designer_reward(None) == 0.0
    # 16 expected plays, only 5 hinted survived (the rest were discarded): not measured
    thin = measure_regret([1] * 5, [0] * 16, expected_plays=16, min_plays_fraction=0.5)
    assert not thin.measured and thin.regret == 0.0 and designer_reward(thin) == 0.0


def test_partial_returns_and_explicit_wins():
    # returns can be fractional or -0.5 (timeouts); the regret is over returns, win rates over wins
    st = measure_regret([0.5, 1.0, -0.5], [0.0, 0.5, 0.0], hint_wins=[False, True, False], no_hint_wins=[0, 0, 0])
    assert st.regret == pytest.approx((1.0 / 3) - (0.5 / 3))
    assert st.win_rate_hint == pytest.approx(1 / 3) and st.win_rate_no_hint == 0.0


def test_learning_progress_by_hand():
    lp = LearningProgress(gamma_fast=0.99, gamma_slow=0.95)
    lp.update("logic", 0.2)  # first update initialises both averages
    assert lp.baseline("logic") == pytest.approx(0.2)
    lp.update("logic", 0.6)  # slow = 0.05 * 0.2 + 0.95 * 0.6 = 0.58
    assert lp.baseline("logic") == pytest.approx(0.58)
    st = measure_regret([1, 1, 0, 0], [1, 0, 0, 0])  # unhinted win rate 0.25
    cfg = RewardConfig(kind="learning_progress")
    assert designer_reward(st, cfg, skill="logic", progress=lp) == pytest.approx(abs(0.25 - 0.58))
    restored = LearningProgress()
    restored.set_state(lp.get_state())
    assert restored.baseline("logic") == lp.baseline("logic")
    with pytest.raises(ValueError, match="reward.kind='nope'"):  # refused when the config is built
        RewardConfig(kind="nope")
