"""selfplay/health.py: the paper's health measures on records with hand-worked answers.

Vendi scores against the eigenvalues of small similarity matrices worked out by hand; families (collapse) on the
seed library's parameter variants, which the novelty gate calls duplicates of their seed; the learnable share at
the band's ends; regret figures and the blend's two terms by hand; the step's row read from a real Memory and a
real SelfPlayBatch.
"""

from __future__ import annotations

import math

import pytest

from spade_jax.config.selfplay import RewardConfig
from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.envs.variants import make_variants
from spade_jax.selfplay.batch import SelfPlayBatch
from spade_jax.selfplay.health import (
    blend_terms,
    classes,
    collapse,
    health_stats,
    learnable_share,
    regret_figures,
    similarity_matrix,
    step_health,
    vendi_score,
)
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.regret import RegretStats, designer_reward
from spade_jax.trajectory import AGENT, DESIGNER, Sample


def _words(prefix: str) -> str:
    """A non-Python text of 10 tokens no other `_words(prefix)` shares (its structure view is empty)."""
    return " ".join(f"{prefix}{i}" for i in range(10))


def test_vendi_counts_effectively_different_programs() -> None:
    a, b, c = _words("alpha"), _words("beta"), _words("gamma")
    assert similarity_matrix([a, b]).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert vendi_score([a, b, c]) == pytest.approx(3.0), "no shared shingle: three different programs"
    assert vendi_score([a, a, a, a]) == pytest.approx(1.0), "four copies are one program"
    # {A, A, B}: K/3 has eigenvalues 2/3, 1/3 and 0, so exp(entropy) = exp(-(2/3 ln 2/3 + 1/3 ln 1/3)) = 1.8899
    assert vendi_score([a, a, b]) == pytest.approx(math.exp(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))))
    assert vendi_score([]) is None


def test_vendi_of_two_programs_follows_their_similarity() -> None:
    """K = [[1, s], [s, 1]] has eigenvalues 1 + s and 1 - s: Vendi = exp(H((1 + s) / 2, (1 - s) / 2))."""
    simon, variant = load_seed_source("simon_recall"), make_variants("simon_recall", 1)[0].source
    s = similarity_matrix([simon, variant])[0, 1]
    assert 0.5 < s < 1.0, "a parameter variant shares its structure and most of its text with its seed"
    p = [(1 + s) / 2, (1 - s) / 2]
    assert vendi_score([simon, variant]) == pytest.approx(math.exp(-sum(x * math.log(x) for x in p)))
    nim = load_seed_source("nim_duel")
    assert vendi_score([simon, nim]) > vendi_score([simon, variant]), "two games are more diverse than one game twice"


def test_classes_are_the_novelty_gates_families() -> None:
    simon = load_seed_source("simon_recall")
    v1, v2, v3 = (v.source for v in make_variants("simon_recall", 3))
    nim = load_seed_source("nim_duel")
    labels = classes([simon, v1, nim, v2, v3])
    assert labels == [0, 0, 1, 0, 0], "simon's parameter variants are simon; nim_duel is another game"
    assert collapse(labels) == {"top_class_share": 0.8, "longest_class_run": 2.0, "classes": 2.0}
    assert collapse(["a", "b", "b", "b", "a"]) == {"top_class_share": 0.6, "longest_class_run": 3.0, "classes": 2.0}
    assert collapse([]) == {}


def test_learnable_share_includes_the_band_ends() -> None:
    assert learnable_share([0.0, 0.2, 0.5, 0.8, 0.81, 1.0]) == pytest.approx(3 / 6)
    assert learnable_share([0.15, 0.85], band=(0.15, 0.85)) == 1.0
    assert learnable_share([]) is None


def _row(wr: float, regret: float, *, hint: str = "ok", measured: bool = True, **extra) -> dict:
    return {"win_rate_no_hint": wr, "regret": regret, "hint_status": hint, "measured": measured, "n_hint": 4,
            "timeouts": 0, "violation": "", **extra}  # fmt: skip


def test_regret_figures_and_blend_terms_by_hand() -> None:
    rows = [_row(0.5, 0.075), _row(0.1, -0.25), _row(0.9, 0.3), _row(0.3, 0.0, hint="missing"),
            _row(0.5, 0.5, measured=False), _row(0.5, 0.5, violation="audit: reset crashed")]  # fmt: skip
    r = regret_figures(rows)
    # only the first three count (a hint that counted, measured, not retired): regrets 0.075, -0.25, 0.3
    assert r["regret_envs"] == 3.0 and r["regret_mean"] == pytest.approx(0.125 / 3)
    assert r["regret_negative_frac"] == pytest.approx(1 / 3)
    mean = 0.125 / 3
    assert r["regret_std"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in (0.075, -0.25, 0.3)) / 3))
    # the paper blend (weights 0.4 / 0.6, scale 0.15, plateau 1 on [0.4, 0.6], ramp 0.25), per counted row:
    # regret terms 0.4 * (0.5, 0, 1, 0) and plateau terms 0.6 * (1, 0, 0, 0.6)
    b = blend_terms(rows, RewardConfig())
    assert b["blend_regret_part"] == pytest.approx(0.4 * 1.5 / 4)
    assert b["blend_plateau_part"] == pytest.approx(0.6 * 1.6 / 4)
    # the two terms add up to the blend reward the designer is paid (selfplay/regret.py)
    for row in rows[:4]:
        one = blend_terms([row])
        stats = RegretStats(4, 4, 0.0, 0.0, 0.0, row["win_rate_no_hint"], row["regret"], True)
        assert one["blend_regret_part"] + one["blend_plateau_part"] == pytest.approx(designer_reward(stats))
    assert regret_figures([_row(0.5, 0.1, hint="leaked")]) == {} and blend_terms([]) == {}


def test_health_stats_leaves_out_what_it_cannot_measure() -> None:
    out = health_stats([], {}, [], [])
    assert out == {}, "nothing measured: no row entries (not zeros)"
    out = health_stats([_row(0.25, 0.1)], {"e1": [True, False, False, False], "e2": [False] * 4}, [], [])
    assert out["health/learnable_frac"] == 1.0 and out["health/step_learnable_frac"] == 0.5
    assert "health/vendi_round" not in out and "health/vendi_archive" not in out


def test_step_health_reads_the_batch_and_the_memory() -> None:
    mem = Memory()
    mem.seed_from_library([s for s in list_seeds() if s.name in ("simon_recall", "nim_duel")])
    v1, v2 = make_variants("simon_recall", 2)
    mem.record_attempt(v1.source, kind="game", skill="memory recall", step=3, valid=True, origin="mutation",
                       mutation_of="seed-simon_recall")  # fmt: skip
    mem.record_attempt("class Broken:", kind="game", skill="memory recall", step=3, valid=False, gate="static")
    mem.record_attempt(v2.source, kind="game", skill="memory recall", step=2, valid=True)  # another round's

    def play(env: str, cond: str, won: bool, role: int = AGENT) -> Sample:
        return Sample([1], [2], [1], [0.0], role=role, reward=float(won), group_id=f"{env}/{cond}",
                      meta={"env_id": env, "condition": cond, "won": won})  # fmt: skip

    samples = [play("a", "no_hint", True), play("a", "no_hint", False), play("a", "hint", True),
               play("b", "no_hint", False), play("b", "no_hint", False),
               play("x", "no_hint", True, DESIGNER)]  # fmt: skip
    batch = SelfPlayBatch(agent=tuple(samples[:5]), designer=tuple(samples[5:]), envs=(_row(0.5, 0.2), _row(0.0, -0.1)))
    out = step_health(batch, mem, 3)
    assert out["health/step_learnable_frac"] == 0.5, "a: 1 of 2 unhinted plays won (in band), b: 0 of 2"
    assert out["health/learnable_frac"] == 0.5 and out["health/regret_negative_frac"] == 0.5
    assert out["health/round_designs"] == 1.0 and out["health/vendi_round"] == pytest.approx(1.0)
    # the archive: two seeds and two simon variants (four programs, two games), in archive order
    assert out["health/archive_classes"] == 2.0 and out["health/archive_top_class_share"] == 0.75
    assert 1.0 < out["health/vendi_archive"] < 4.0
    mem.close()
