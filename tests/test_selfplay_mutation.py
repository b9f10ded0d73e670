"""Mutation designs (ACCEL-style, issue 17 section 1): a share of a round's targets show the designer one measured
archive entry and ask for a changed version of it. A replaying generator stands in for the model and a
scripted policy for the agent; the gates (novelty included) run for real in the sandbox pool.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

import pytest

from spade_jax.config.selfplay import (
    CorpusConfig,
    DesignerConfig,
    HintConfig,
    MemoryConfig,
    RolloutConfig,
    SelfPlayConfig,
)
from spade_jax.envs.contract import contract_examples
from spade_jax.envs.seeds import load_seed_source
from spade_jax.selfplay.cycle import SelfPlay
from spade_jax.selfplay.designer import Designer, DesignTarget, mutation_direction, mutation_messages
from spade_jax.selfplay.memory import Memory
from spade_jax.selfplay.rollouts import ScriptedPolicy

POOL_WORKERS = 2
POOL_CALL_TIMEOUT_S = 2.0

HIGHER_LOWER = contract_examples()["game"]
NUMBER_TARGET = load_seed_source("number_target")
CODE_BREAKER = load_seed_source("code_breaker")
BROKEN = "class Nothing:\n    pass\n"
LD = "logical deduction"


@dataclass
class _Completion:
    prompt_ids: list
    token_ids: list
    logprobs: list
    raw_logprobs: list
    text: str
    finish_reason: str = "eos"


class Replay:
    """A designer 'model' that writes the given programs in order, recording the prompts it was given."""

    def __init__(self, tokenizer, sources: list[str], max_total_len: int = 4096):
        self.tok, self.sources, self.max_total_len = tokenizer, list(sources), max_total_len
        self.prompts: list[str] = []

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            self.prompts.append(self.tok.decode(list(p)))
            text = "```python\n" + self.sources.pop(0) + "```\n"
            ids = self.tok.encode(text, add_special_tokens=False)
            out.append(_Completion(list(p), ids, [-0.5] * len(ids), [-0.5] * len(ids), text))
        return out


def _archived(mem: Memory, code: str, *, skill: str = LD, win_rate: float | None = 0.5, regret: float = 0.0,
              step: int = 0, kind: str = "game") -> str:  # fmt: skip
    """A valid archive entry, measured at `win_rate` (None: never played); returns its id."""
    rec = mem.record_attempt(code, kind=kind, skill=skill, step=step, valid=True, gate="novelty", name="Parent")
    if win_rate is not None:
        mem.update_stats(rec.id, win_rate_no_hint=win_rate, win_rate_hint=min(1.0, win_rate + regret),
                         regret=regret, plays=8)  # fmt: skip
    return rec.id


def _config(**designer) -> SelfPlayConfig:
    return SelfPlayConfig(
        plays_per_condition=2, envs_per_step=2, skills=(LD,), train_agent_on_hinted=True,
        corpus=CorpusConfig(max_doc_tokens=64),
        memory=MemoryConfig(seed_from_library=False, n_positive=0, n_negative=0),
        designer=DesignerConfig(**{"context_len": 4096, "max_new_tokens": 1500, "max_resamples": 0, **designer}),
        designer_reward_scale=1.0, hints=HintConfig(source="env_or_model"), rollout=RolloutConfig(max_turns=4),
    )  # fmt: skip


def test_config_is_validated():
    assert DesignerConfig().mutation_share == 0.0 and DesignerConfig().mutation_parents == "band_then_regret"
    for bad in (dict(mutation_share=1.5), dict(mutation_share=-0.1), dict(mutation_parents="best"),
                dict(mutation_share=0.5, use_memory=False)):  # fmt: skip
        with pytest.raises(ValueError, match="mutation"):
            DesignerConfig(**bad)
    assert DesignerConfig(mutation_parents="seeds", place_parents=8).place_parents == 8
    with pytest.raises(ValueError, match="place_parents"):
        DesignerConfig(place_parents=-1)


def test_prompt_shows_the_parent_and_the_direction_its_win_rate_calls_for(tokenizer):
    """Above the band: harder (with concrete knobs); below: easier; inside: a twist at the same difficulty."""
    band = MemoryConfig().positive_band
    assert [mutation_direction(w, band) for w in (0.9, 0.86, 0.85, 0.5, 0.15, 0.1, 0.0)] == [
        "harder", "harder", "twist", "twist", "twist", "easier", "easier"]  # fmt: skip
    mem = Memory(config=MemoryConfig(seed_from_library=False))
    designer = Designer(Replay(tokenizer, []), tokenizer, None, mem, DesignerConfig(context_len=4096,
                        max_new_tokens=1500))  # fmt: skip
    expected = {0.95: ("HARDER", "fewer turns"), 0.0: ("EASIER", "more turns"), 0.5: ("TWIST", "keep it")}
    for step, (wr, (word, knob)) in enumerate(expected.items()):
        pid = _archived(mem, HIGHER_LOWER + f"\n# variant {step}\n", win_rate=wr, regret=0.25, step=step)
        msgs, ids, parent = designer.fit_mutation(DesignTarget("game", LD, pid))
        text = tokenizer.decode(ids)
        assert parent.id == pid and HIGHER_LOWER.strip() in msgs[-1]["content"]
        assert "Below is an environment" in text and word in text and knob in text
        assert f"wins {wr:.0%} of its episodes" in text and "+0.25 (the regret)" in text
        assert "<document>" not in text and "Example 1" not in text  # the parent replaces document and exemplars
        assert 'SKILL = "logical deduction"' in text and "ONE ```python code block" in text
        # 4K context: no room for the contract beside the parent, which stands for it
        assert "# Environment contract" not in text and "Keep the environment contract" in text
    roomy = Designer(Replay(tokenizer, [], max_total_len=32768), tokenizer, None, mem,
                     DesignerConfig(context_len=8192, max_new_tokens=1500))  # fmt: skip
    text = tokenizer.decode(roomy.fit_mutation(DesignTarget("game", LD, pid))[1])
    assert "# Environment contract" in text and "Keep the environment contract" not in text
    # a target of another skill than the parent's: the child must train the target's skill
    other = mutation_messages(mem.get(pid), DesignTarget("game", "spatial reasoning", pid), band)[-1]["content"]
    assert 'written for the skill "logical deduction"' in other and 'SKILL = "spatial reasoning"' in other


def test_parents_in_band_first_by_regret_of_the_targets_skill():
    mem = Memory(config=MemoryConfig(seed_from_library=False))
    low = _archived(mem, "a = 1\n", win_rate=0.5, regret=0.1, step=1)
    high = _archived(mem, "b = 2\n", win_rate=0.4, regret=0.3, step=2)
    easy = _archived(mem, "c = 3\n", win_rate=0.95, regret=0.5, step=3)
    hard = _archived(mem, "d = 4\n", win_rate=0.0, regret=0.0, step=4)
    new = _archived(mem, "e = 5\n", win_rate=None, step=5)  # never measured: last (a run's seeds)
    _archived(mem, "f = 6\n", win_rate=0.5, regret=0.9, step=6, kind="tool", skill="Data_Retrieval")  # other kind
    other = _archived(mem, "g = 7\n", skill="spatial reasoning", win_rate=0.5, regret=0.2, step=7)
    ids = lambda recs: [r.id for r in recs]  # noqa: E731
    assert ids(mem.mutation_parents("game", LD)) == [high, low, easy, hard, new]
    assert ids(mem.mutation_parents("game", LD, "band")) == [high, low]
    assert ids(mem.mutation_parents("game", LD, "regret")) == [easy, high, low, hard, new]
    assert ids(mem.mutation_parents("game", "spatial reasoning")) == [other]  # the skill's own first
    assert ids(mem.mutation_parents("game", "memory recall")) == [high, other, low, easy, hard, new]  # the kind's
    assert mem.mutation_parents("reasoning", LD) == []


def test_share_of_mutation_targets_keeps_the_rounds_skills():
    """The last round(n * share) targets are mutations; each keeps its (kind, skill) and takes a parent of that
    skill where one exists (else of the kind), distinct parents first."""
    cfg = SelfPlayConfig(envs_per_step=4, skills=(LD, "spatial reasoning"), designer=DesignerConfig(mutation_share=0.5),
                         memory=MemoryConfig(seed_from_library=False))  # fmt: skip
    sp = SelfPlay(cfg, sampler=None, tokenizer=None, pool=None, corpus=None)
    assert all(t.parent_id is None for t in sp.targets(4))  # an empty archive: all from scratch
    best = _archived(sp.memory, "a = 1\n", win_rate=0.5, regret=0.3, step=1)
    second = _archived(sp.memory, "b = 2\n", win_rate=0.6, regret=0.1, step=2)
    targets = sp.targets(4)
    assert [(t.skill, t.parent_id) for t in targets] == [(LD, None), ("spatial reasoning", None), (LD, best),
                                                        ("spatial reasoning", second)]  # fmt: skip
    spatial = _archived(sp.memory, "c = 3\n", skill="spatial reasoning", win_rate=0.95, step=3)
    assert [t.parent_id for t in sp.targets(4)] == [None, None, best, spatial]  # the skill's own, even out of band
    for share, n, m in ((0.0, 4, 0), (0.25, 4, 1), (0.5, 3, 2), (1.0, 4, 4), (0.1, 4, 0)):
        sp.config.designer.mutation_share = share
        assert sum(t.parent_id is not None for t in sp.targets(n)) == m, (share, n)


def test_a_mutation_round_records_the_parent_and_the_gates_apply(pool, tokenizer):
    """Round 1: the mutation copies its parent verbatim -> rejected by novelty. Round 2: a new program -> valid,
    archived with `mutation_of` = the parent, played, and counted in the stats."""
    cfg = _config(mutation_share=0.5)
    sources = [NUMBER_TARGET, HIGHER_LOWER, BROKEN, CODE_BREAKER]
    sp = SelfPlay(cfg, sampler=Replay(tokenizer, sources), tokenizer=tokenizer, pool=pool,
                  agent_policy=ScriptedPolicy(lambda req: "\\boxed{50}"))  # fmt: skip
    parent = _archived(sp.memory, HIGHER_LOWER, win_rate=1.0, regret=0.0, step=-1)
    first = sp.step(0)
    scratch = sp.designer.sampler.prompts[:2]
    assert "Write a NEW environment" in scratch[0] and "Below is an environment" not in scratch[0]
    assert "Below is an environment" in scratch[1] and HIGHER_LOWER.strip() in scratch[1]  # the parent's code
    assert "HARDER" in scratch[1]  # it won all its plays
    rows = sp.memory.attempts(step=0)
    assert [(r.origin, r.mutation_of) for r in rows] == [("designer", None), ("mutation", parent)]
    copy = rows[1]
    assert copy.status == "invalid" and copy.verdict_gate == "novelty" and copy.parent_id is None
    assert first.stats["design/mutations"] == 1 and first.stats["design/mutation_valid_frac"] == 0.0
    assert first.stats["design/mutation_fallbacks"] == 0
    # the next round: a broken scratch design, a valid mutation of the best parent now (the plays of step 0
    # measured the parent and the scratch design anew)
    expected = sp.memory.mutation_parents("game", LD)[0].id
    second = sp.step(4)
    sp.close()
    child = [r for r in sp.memory.attempts(step=4) if r.origin == "mutation"]
    assert len(child) == 1 and child[0].status == "valid" and child[0].mutation_of == expected
    assert child[0].name == "CodeBreaker" and child[0].measured  # played this step like any design
    assert second.stats["design/mutations"] == 1 and second.stats["design/mutation_valid_frac"] == 1.0
    assert {e.env_id for e in sp.state.current} >= {child[0].id}


def test_a_mutations_repair_keeps_the_parent_and_both_links(pool, tokenizer):
    """`parent_id` stays the repaired attempt; `mutation_of` names the archived parent on every attempt."""
    mem = Memory(config=MemoryConfig(seed_from_library=False))
    parent = _archived(mem, HIGHER_LOWER, win_rate=0.0, step=-1)
    replay = Replay(tokenizer, [BROKEN, NUMBER_TARGET])
    cfg = DesignerConfig(context_len=4096, max_new_tokens=1200, on_invalid="repair", max_repairs=1)
    (res,) = Designer(replay, tokenizer, pool, mem, cfg).design([DesignTarget("game", LD, parent)], step=3)
    assert res.valid and res.mutation_of == parent and res.doc_id is None
    assert "EASIER" in replay.prompts[1] and HIGHER_LOWER.strip() in replay.prompts[1]  # still shown the parent
    assert res.attempts[0].verdict.reason in replay.prompts[1] and "class Nothing" in replay.prompts[1]
    first, fixed = mem.attempts(step=3)
    assert (first.mutation_of, fixed.mutation_of, fixed.parent_id) == (parent, parent, first.id)
    assert first.origin == fixed.origin == "mutation"


def test_a_parent_too_long_for_the_context_falls_back_to_a_scratch_design(pool, tokenizer):
    mem = Memory(config=MemoryConfig(seed_from_library=False))
    long = HIGHER_LOWER + "".join(f"# note {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    parent = _archived(mem, long, win_rate=0.5, step=-1)
    gone = "s0-a0-evicted"  # not in the archive (evicted): not a parent either
    replay = Replay(tokenizer, [NUMBER_TARGET, CODE_BREAKER])
    designer = Designer(replay, tokenizer, pool, mem, DesignerConfig(context_len=4096, max_new_tokens=1500,
                        max_resamples=0))  # fmt: skip
    assert designer.fit_mutation(DesignTarget("game", LD, parent)) is None
    results = designer.design([DesignTarget("game", LD, parent), DesignTarget("game", LD, gone)], step=2)
    assert [r.mutation_of for r in results] == [None, None] and all(r.valid for r in results)
    assert all("Write a NEW environment" in p and "quick brown fox" not in p for p in replay.prompts)
    assert [r.origin for r in mem.attempts(step=2)] == ["designer", "designer"]


def test_an_older_memory_file_gains_the_mutation_column(tmp_path):
    path = tmp_path / "memory.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE envs (id TEXT PRIMARY KEY, code TEXT NOT NULL, kind TEXT NOT NULL DEFAULT '', "
               "skill TEXT NOT NULL DEFAULT '', name TEXT NOT NULL DEFAULT '', origin TEXT NOT NULL DEFAULT "
               "'designer', status TEXT NOT NULL DEFAULT 'valid', doc_id TEXT, parent_id TEXT, attempt INTEGER "
               "NOT NULL DEFAULT 0, verdict_valid INTEGER NOT NULL DEFAULT 0, verdict_gate TEXT, verdict_reason "
               "TEXT, win_rate_hint REAL, win_rate_no_hint REAL, return_hint REAL, return_no_hint REAL, regret "
               "REAL, designer_reward REAL, step INTEGER NOT NULL DEFAULT 0, plays INTEGER NOT NULL DEFAULT 0, "
               "created REAL NOT NULL DEFAULT 0)")  # fmt: skip
    db.execute("INSERT INTO envs (id, code, kind, verdict_valid) VALUES ('old', 'a = 1', 'game', 1)")
    db.commit()
    db.close()
    mem = Memory(path)
    assert mem.get("old").mutation_of is None and [r.id for r in mem.archive()] == ["old"]
    child = mem.record_attempt("b = 2", kind="game", skill=LD, step=1, valid=True, origin="mutation",
                               mutation_of="old")  # fmt: skip
    mem.close()
    assert Memory(path).get(child.id).mutation_of == "old"


def test_an_unmeasured_parent_is_asked_for_a_variant_and_constants_may_be_enough():
    """A run's seeds are parents before the agent has played them: the prompt says so and asks for a variant;
    with parameter variants allowed (memory.max_param_variants), it says new constants are change enough."""
    mem = Memory(config=MemoryConfig(seed_from_library=False))
    pid = _archived(mem, HIGHER_LOWER, win_rate=None, step=-1)
    band = mem.config.positive_band
    strict = mutation_messages(mem.get(pid), DesignTarget("game", LD, pid), band)[-1]["content"]
    assert "not yet played by the current agent" in strict and "VARIANT" in strict and "wins 0%" not in strict
    assert "Changing only numbers or names is not enough" in strict
    loose = mutation_messages(mem.get(pid), DesignTarget("game", LD, pid), band, constants_ok=True)[-1]["content"]
    assert "Changing its difficulty constants" in loose and "not enough" not in loose


def test_a_mutation_of_a_paper_format_parent_keeps_its_format():
    """A parent in the paper's Gym-style format (no KIND/SKILL attributes) is asked for a class named ...Env;
    one of ours for its KIND and SKILL."""
    from spade_jax.envs.contract import CONTRACT_TEXT_GYM
    from spade_jax.selfplay.memory import EnvRecord

    (gym_code,) = re.findall(r"```python\n(.*?)```", CONTRACT_TEXT_GYM, re.S)
    target = DesignTarget("game", "logical deduction", "p")
    gym = EnvRecord(id="p", code=gym_code, kind="game", skill="logical deduction", win_rate_no_hint=0.9)
    text = mutation_messages(gym, target, (0.4, 0.6))[-1]["content"]
    assert "End the class name in Env." in text and "Set KIND" not in text
    ours = EnvRecord(id="p", code=load_seed_source("nim_duel"), kind="game", skill="logical deduction")
    assert 'Set KIND = "game"' in mutation_messages(ours, target, (0.4, 0.6))[-1]["content"]


@pytest.mark.parametrize("plays", [0, 2])
def test_unmeasured_seed_parents_are_placed_before_the_prompts(pool, tokenizer, plays):
    """`designer.place_parents`: the seed a mutation shows is played unhinted that many times before the round's
    prompts are written, and its prompt states the measured win rate; it is played once, not every round. With 0
    the prompt says it was never played."""
    cfg = _config(mutation_share=1.0, mutation_parents="seeds", place_parents=plays)
    cfg.memory = MemoryConfig(seed_names=("number_target",), n_positive=0, n_negative=0)
    sp = SelfPlay(cfg, sampler=Replay(tokenizer, [BROKEN] * 4), tokenizer=tokenizer, pool=pool,
                  agent_policy=ScriptedPolicy(lambda req: "\\boxed{50}"))  # fmt: skip
    try:
        sp.design(0, 2)
        seed = sp.memory.get("seed-number_target")
        prompts = sp.designer.sampler.prompts
        assert len(prompts) == 2 and all("Below is an environment" in p for p in prompts)
        if not plays:
            assert not seed.measured and all("not yet played by the current agent" in p for p in prompts)
            return
        assert seed.measured and seed.plays == plays and 0.0 <= seed.win_rate_no_hint <= 1.0
        assert all(f"wins {seed.win_rate_no_hint:.0%} of its episodes" in p for p in prompts)
        sp.design(1, 2)
        assert sp.memory.get("seed-number_target").plays == plays, "placed once"
        assert not [r for r in sp.memory.attempts() if r.origin not in ("seed", "mutation")], "nothing else archived"
    finally:
        sp.close()
