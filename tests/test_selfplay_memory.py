"""Environment memory: persistence, exemplar bands, eviction rule, novelty, seeding, snapshot roll-back."""

from __future__ import annotations

import json
import random

from spade_jax.config.selfplay import MemoryConfig
from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.selfplay.memory import EnvRecord, Memory


def _code(i: int) -> str:
    # structurally different programs (a loop nest of depth i) so novelty never merges them
    body = "\n".join("    " * (k + 1) + f"for v{k} in range({k + 2}):" for k in range(i % 6 + 1))
    return f"class Env{i}:\n    def f(self):\n{body}\n" + "    " * (i % 6 + 2) + f"x = {i} * {i}\n"


def _add(mem: Memory, i: int, wr: float | None, regret: float | None, step: int, skill: str = "logic") -> EnvRecord:
    rec = mem.record_attempt(_code(i), kind="game", skill=skill, step=step, valid=True, gate="novelty", reason="ok")
    if wr is not None:
        mem.update_stats(rec.id, win_rate_no_hint=wr, win_rate_hint=min(1.0, wr + (regret or 0)), regret=regret,
                         plays=8)  # fmt: skip
    return mem.get(rec.id)


def test_rows_persist_with_all_fields(tmp_path):
    path = tmp_path / "run" / "memory.sqlite"
    mem = Memory(path)
    rec = mem.record_attempt("class A: pass", kind="game", skill="logic", step=3, valid=False, gate="static",
                             reason="no environment class", doc_id="pydoc:if", attempt=1)  # fmt: skip
    good = _add(mem, 1, 0.5, 0.25, step=3)
    mem.update_stats(good.id, designer_reward=0.9, plays=8)
    mem.close()
    again = Memory(path)
    bad = again.get(rec.id)
    assert bad.status == "invalid" and bad.verdict_gate == "static" and bad.verdict_reason == "no environment class"
    assert bad.doc_id == "pydoc:if" and bad.attempt == 1 and bad.step == 3 and not bad.verdict_valid
    g = again.get(good.id)
    assert g.status == "valid" and g.win_rate_no_hint == 0.5 and g.regret == 0.25 and g.designer_reward == 0.9
    assert g.plays == 16  # play counts accumulate
    assert [r.id for r in again.archive()] == [good.id]  # invalid rows are not in the archive


def test_exemplar_selection_follows_the_bands():
    mem = Memory(config=MemoryConfig(seed=1))
    wrs = [0.05, 0.12, 0.15, 0.3, 0.5, 0.7, 0.85, 0.88, 0.95, 0.5]
    regrets = [0.9, 0.8, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.05]
    recs = [_add(mem, i, wr, rg, step=i) for i, (wr, rg) in enumerate(zip(wrs, regrets))]
    in_band = {r.id for r in recs if 0.15 <= r.win_rate_no_hint <= 0.85}
    negative = {r.id for r in recs if r.win_rate_no_hint > 0.9 or r.win_rate_no_hint < 0.1}
    assert len(in_band) == 6 and len(negative) == 2
    for _ in range(20):
        pos = mem.positives(2, kind="game")
        assert len(pos) == 2 and {p.id for p in pos} <= in_band
        assert {n.id for n in mem.negatives(3)} == negative


def test_positives_come_from_the_top_by_regret():
    mem = Memory(config=MemoryConfig(seed=0))
    # 30 in-band envs with distinct regrets; n=2 -> sample from the top max(6, 10) = 10 by regret
    recs = [_add(mem, i, 0.5, i / 100, step=i) for i in range(30)]
    top10 = {r.id for r in sorted(recs, key=lambda r: -r.regret)[:10]}
    seen = set()
    for _ in range(200):
        seen |= {p.id for p in mem.positives(2)}
    assert seen == top10
    # n=5 -> top max(15, 10) = 15
    top15 = {r.id for r in sorted(recs, key=lambda r: -r.regret)[:15]}
    seen = set()
    for _ in range(300):
        seen |= {p.id for p in mem.positives(5)}
    assert seen == top15


def test_same_skill_preferred_then_any():
    mem = Memory(config=MemoryConfig(seed=0))
    a = _add(mem, 1, 0.5, 0.3, step=1, skill="logic")
    b = _add(mem, 2, 0.5, 0.3, step=2, skill="memory recall")
    assert [p.id for p in mem.positives(1, kind="game", skill="logic")] == [a.id]
    assert [p.id for p in mem.positives(1, kind="game", skill="memory recall")] == [b.id]
    assert len(mem.positives(1, kind="game", skill="optimization")) == 1  # falls back to any skill


def test_eviction_is_fifo_by_step_and_bounded():
    mem = Memory(config=MemoryConfig(capacity=5))
    steps = [4, 0, 3, 1, 2, 5, 6]  # added in this order
    recs = [_add(mem, i, 0.5, 0.1, step=s) for i, s in enumerate(steps)]
    assert mem.count("valid") == 5 and mem.count("evicted") == 2
    evicted = {r.id for r in mem.attempts() if r.status == "evicted"}
    assert evicted == {recs[1].id, recs[3].id}  # the two made at the earliest steps (0 and 1)
    assert recs[1].id not in mem.archive_sources()
    # an evicted program is no longer a novelty target; an archived one is
    assert mem.check_novelty(recs[1].code).novel
    assert not mem.check_novelty(recs[0].code).novel


def test_seeded_from_library_and_novelty_rejects_copies():
    mem = Memory()
    n = mem.seed_from_library()
    seeds = list_seeds()
    assert n == len(seeds) and mem.seed_from_library() == 0  # idempotent
    assert {r.name for r in mem.archive()} == {s.name for s in seeds}
    assert all(r.origin == "seed" and r.step == -1 for r in mem.archive())
    # unmeasured seeds stand in as positives at the start of a run
    assert len(mem.positives(2, kind="game")) == 2 and mem.negatives(1) == []
    src = load_seed_source(seeds[0].name)
    renamed = "# a copy\n" + src.replace('"""', '"""Copied. ', 1)
    assert not mem.check_novelty(renamed).novel


def test_seed_names_and_easiest_seeds():
    import ast

    import pytest

    def knobs(code: str) -> dict[str, int]:  # the class-level numeric constants, read independently of variants.py
        cls = next(n for n in ast.parse(code).body if isinstance(n, ast.ClassDef))
        return {t.id: n.value.value for n in cls.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)
                and type(n.value.value) is int}  # fmt: skip

    mem = Memory(config=MemoryConfig(seed_names=("sonar_hunt", "balance_scale"), seed_difficulty="easiest"))
    assert mem.seed_from_library() == 2
    by_name = {r.name: r for r in mem.archive()}
    assert set(by_name) == {"sonar_hunt", "balance_scale"}
    written, easy = knobs(load_seed_source("sonar_hunt")), knobs(by_name["sonar_hunt"].code)
    # a smaller grid or more pings, never harder on either knob
    assert easy != written and easy["GRID"] <= written["GRID"] and easy["PINGS"] >= written["PINGS"]
    assert "easiest variant" in by_name["sonar_hunt"].verdict_reason
    plain = Memory(config=MemoryConfig(seed_names=("sonar_hunt",)))
    assert plain.seed_from_library() == 1 and plain.archive()[0].code == load_seed_source("sonar_hunt")
    with pytest.raises(ValueError, match="no_such_game"):
        MemoryConfig(seed_names=("no_such_game",))
    with pytest.raises(ValueError, match="seed_difficulty"):
        MemoryConfig(seed_difficulty="hardest")


def test_spread_seeds_span_the_table_and_only_seeds_are_parents_under_the_seeds_rule():
    """`seed_difficulty="spread"`: the easiest variant as the seed, then variants up to the table's hardest (read
    from the table itself: every knob at its last value, constraints allowing); `mutation_parents="seeds"` keeps
    those, whatever the designs archived beside them."""
    import ast

    import pytest

    from spade_jax.envs.variants import PARAMS

    def knobs(code: str) -> dict[str, int]:  # the table's constants, at module or class level
        tree = ast.parse(code)
        body = tree.body + [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body]
        return {t.id: n.value.value for n in body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name) and t.id in PARAMS["simon_recall"]}  # fmt: skip

    mem = Memory(config=MemoryConfig(seed_names=("simon_recall",), seed_difficulty="spread", seed_spread=4))
    assert mem.seed_from_library() == 4 and mem.seed_from_library() == 0, "once"
    simon = sorted(mem.archive(), key=lambda r: r.created)
    table = PARAMS["simon_recall"]
    first, last = knobs(simon[0].code), knobs(simon[-1].code)
    assert simon[0].id == "seed-simon_recall" and first == {k: v[0] for k, v in table.items()}, "the easiest"
    assert last["GOAL"] == table["GOAL"][-1] and last["LIVES"] == table["LIVES"][-1], "the hardest"
    goals = [knobs(r.code)["GOAL"] for r in simon]
    assert goals == sorted(goals) and len({r.code for r in simon}) == 4 and all(r.origin == "seed" for r in simon)
    design = mem.record_attempt("x = 1\n", kind=simon[0].kind, skill=simon[0].skill, step=0, valid=True)
    mem.update_stats(design.id, win_rate_no_hint=0.5, regret=0.9, plays=8)
    assert mem.mutation_parents(simon[0].kind, simon[0].skill)[0].id == design.id, "the default rule takes it"
    seeds_only = mem.mutation_parents(simon[0].kind, simon[0].skill, "seeds")
    assert design.id not in {r.id for r in seeds_only} and {r.id for r in simon} <= {r.id for r in seeds_only}
    as_written = Memory(config=MemoryConfig(seed_names=("number_target",), seed_difficulty="spread", seed_spread=4))
    assert as_written.seed_from_library() == 4, "a seed written at its easiest: still the easiest and 3 more"
    one = Memory(config=MemoryConfig(seed_names=("simon_recall",), seed_difficulty="spread", seed_spread=1))
    assert one.seed_from_library() == 1 and knobs(one.archive()[0].code) == first
    with pytest.raises(ValueError, match="seed_spread"):
        MemoryConfig(seed_spread=0)


def test_snapshot_rolls_back_later_rows_and_stats():
    mem = Memory(config=MemoryConfig(capacity=3, seed=5))
    first = [_add(mem, i, 0.5, 0.1 * i, step=i) for i in range(3)]
    state = json.loads(json.dumps(mem.get_state()))
    picks_before = [p.id for p in mem.positives(1)]
    later = _add(mem, 10, 0.2, 0.0, step=10)  # evicts first[0]
    mem.update_stats(first[1].id, win_rate_no_hint=0.99, regret=-1.0, plays=4)
    assert mem.get(first[0].id).status == "evicted"
    mem.set_state(state)
    assert mem.get(later.id) is None
    assert mem.get(first[0].id).status == "valid"
    assert mem.get(first[1].id).win_rate_no_hint == 0.5 and mem.get(first[1].id).plays == 8
    assert [p.id for p in mem.positives(1)] == picks_before  # exemplar RNG restored too
    assert not mem.check_novelty(first[0].code).novel


def test_invalid_rows_are_bounded():
    mem = Memory(config=MemoryConfig(max_invalid_rows=4))
    rng = random.Random(0)
    for i in range(9):
        mem.record_attempt(f"bad {i} {rng.random()}", kind="game", skill="x", step=i, valid=False, gate="extract")
    rows = [r for r in mem.attempts() if r.status == "invalid"]
    assert len(rows) == 4 and [r.step for r in rows] == [5, 6, 7, 8]
