"""What the reference asks its designer for and what it remembers (issue 45, points 5-8), checked against its
rules as read in its code (prompts/corpus_template.py, corpus_orchestrator.py, env_memory.py, spade_rollout.py,
corpus.py, delayed_env_rewards.py), with the expected values worked out here by hand. No model and no sandbox:
the designer's sampler is a stand-in that writes no code, so every attempt fails the first gate.
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from spade_jax.config.selfplay import CorpusConfig, DesignerConfig, MemoryConfig, RewardConfig, SelfPlayConfig
from spade_jax.envs.contract import CONTRACT_TEXT_INTERACTIVE
from spade_jax.selfplay.admission import remember
from spade_jax.selfplay.corpus import Corpus, Document
from spade_jax.selfplay.designer import Designer, DesignTarget, PromptParts, reference_messages
from spade_jax.selfplay.memory import EnvRecord, Memory
from spade_jax.selfplay.regret import RegretStats, designer_reward, plateau
from spade_jax.selfplay.window import EnvWindow, HintStatus, Recorded, Round, window_stats

SKILL = "mathematical reasoning"


def _record(rid: str, skill: str, win: float | None, regret: float = 0.2, code: str = "", origin="designer"):
    return EnvRecord(id=rid, code=code or f"class {rid}Env: pass\n", kind="game", skill=skill, name=rid, origin=origin,
                     status="valid", verdict_valid=True, win_rate_no_hint=win, regret=regret)  # fmt: skip


# --------------------------------------------------------------------------------------- point 5: prompt


def test_reference_prompt_layout():
    long_code = "".join(f"# line {i:04d}\n" for i in range(300))  # 3,300 characters
    parts = PromptParts(DesignTarget("game", SKILL), Document("d1", "  The Euclidean algorithm ...  ", "c"),
                        [_record("good", SKILL, 0.5, 0.31, long_code)], [_record("game_00004_003", SKILL, 0.95)],
                        exemplar_max_chars=2000)  # fmt: skip
    system, user = reference_messages(parts, "interactive", "medium")
    assert system["role"] == "system" and system["content"].count(".") == 1  # one sentence
    text = user["content"]
    order = [
        "<REFERENCE_DOCUMENT>\nThe Euclidean algorithm ...\n</REFERENCE_DOCUMENT>",
        CONTRACT_TEXT_INTERACTIVE.strip(),
        "Target skill: Mathematical Reasoning (",
        "DIFFICULTY: medium: the goal should need 3+ interaction steps.",
        "Generate the complete Python code in a ```python block.",
        "<REFERENCE_ENVIRONMENTS>",
        "### Example 1 (skill: mathematical reasoning, win_rate: 0.50, regret: 0.31)",
        "</REFERENCE_ENVIRONMENTS>",
        "Avoid generating environments like:\n- too easy (win_rate=0.95): class game_00004_003",
    ]
    at = [text.index(piece) for piece in order]
    assert at == sorted(at)
    assert long_code[:2000] + "\n```" in text and long_code[2000:2012] not in text  # cut at 2000, no marker
    assert "truncated" not in text.split("<REFERENCE_ENVIRONMENTS>")[1]
    assert "```python\nclass game_00004_003Env" not in text  # the negative by name only

    bare = reference_messages(PromptParts(DesignTarget("game", SKILL), None, [], []), "interactive", "easy")[1]
    assert "REFERENCE_ENVIRONMENTS" not in bare["content"] and "Avoid" not in bare["content"]
    assert "2+ interaction steps" in bare["content"]


def test_designer_renders_the_reference_prompt(tokenizer):
    memory = Memory(":memory:", MemoryConfig(seed_from_library=False))
    cfg = DesignerConfig(prompt="reference", contract="interactive", context_len=8192, max_new_tokens=512)
    designer = Designer(None, tokenizer, None, memory, cfg, exemplars=(2, 1), exemplar_max_chars=2000)
    msgs, ids, _ = designer.fit(PromptParts(DesignTarget("game", SKILL), Document("d", "A text.", "c")))
    assert msgs == reference_messages(PromptParts(DesignTarget("game", SKILL), Document("d", "A text.", "c")))
    assert tokenizer.decode(ids).count("<REFERENCE_DOCUMENT>") == 1


def test_exemplars_of_the_target_skill_only():
    """high_regret_seeds / low_quality_examples: the target's skill only, in [0.15, 0.85] by regret for positives,
    > 0.9 or < 0.1 for negatives; no unmeasured seed stands in."""
    for fallback in (False, True):
        memory = Memory(":memory:", MemoryConfig(exemplar_fallback=fallback, seed_from_library=False))
        memory.add(_record("mine", SKILL, 0.5, 0.4))
        memory.add(_record("other", "optimization", 0.5, 0.9))
        memory.add(_record("otherneg", "optimization", 0.95))
        memory.add(_record("seed", SKILL, None, origin="seed"))
        pos = {r.id for r in memory.positives(2, kind="game", skill=SKILL)}
        neg = {r.id for r in memory.negatives(1, kind="game", skill=SKILL)}
        if fallback:  # ours: the seed fills the second positive in, the other skill's negative stands in
            assert pos == {"mine", "seed"} and neg == {"otherneg"}
        else:
            assert pos == {"mine"} and neg == set()


# ------------------------------------------------------------------------------- points 6 and 8: documents


def _corpus_file(tmp_path, n: int = 7):
    docs = [{"id": f"doc{i}", "text": " ".join(f"d{i}w{j}" for j in range(4 + i))} for i in range(n)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path, docs


def test_corpus_uniform_draws_and_marker(tmp_path):
    """CorpusLoader: random.Random(42); sample(documents, 1) per draw; a document of more than N words becomes its
    first N words joined by spaces plus "\\n[Document truncated at ~N words]"."""
    path, docs = _corpus_file(tmp_path)
    cfg = CorpusConfig(paths=(str(path),), seed=42, sampling="uniform", max_doc_words=6, truncation_marker=True)
    corpus = Corpus(cfg)
    rng = random.Random(42)
    expected = [rng.sample(docs, 1)[0] for _ in range(12)]
    got = [corpus.next() for _ in range(12)]
    assert [d.id for d in got] == [d["id"] for d in expected]
    assert len({d.id for d in got}) < 12  # independent draws: repeats within a pass over 7 documents
    for doc, ref in zip(got, expected):
        words = ref["text"].split()
        want = ref["text"] if len(words) <= 6 else " ".join(words[:6]) + "\n[Document truncated at ~6 words]"
        assert doc.text == want
    state = json.loads(json.dumps(corpus.get_state()))
    after = [corpus.next().id for _ in range(3)]
    again = Corpus(cfg)
    again.set_state(state)
    assert [again.next().id for _ in range(3)] == after


class _NoCode:
    """A designer sampler that writes prose: every attempt fails at extraction (no sandbox needed)."""

    max_total_len = 8192

    def __init__(self, tokenizer):
        self.tok, self.prompts = tokenizer, []

    def generate(self, prompts, params):
        self.prompts += [self.tok.decode(p) for p in prompts]
        return [SimpleNamespace(text="no code today", token_ids=[5], logprobs=[-1.0], raw_logprobs=[-1.0],
                                finish_reason="eos") for _ in prompts]  # fmt: skip


def test_every_resample_draws_a_new_document_and_exemplars(tokenizer, tmp_path):
    """_generate_single_game_async: each of the 5 attempts draws corpus.sample(1) anew and rebuilds the memory
    blocks; ours reuses the first prompt unless resample_fresh_prompt."""
    path, docs = _corpus_file(tmp_path)
    for fresh in (True, False):
        memory = Memory(":memory:", MemoryConfig(seed_from_library=False, exemplar_fallback=False, seed=1))
        for i in range(6):
            memory.add(_record(f"ex{i}", SKILL, 0.5, 0.1 * i))
        corpus = Corpus(CorpusConfig(paths=(str(path),), seed=42, sampling="uniform"))
        sampler = _NoCode(tokenizer)
        cfg = DesignerConfig(prompt="reference", contract="interactive", context_len=8192, max_new_tokens=512,
                             max_resamples=4, resample_fresh_prompt=fresh)  # fmt: skip
        designer = Designer(sampler, tokenizer, None, memory, cfg, corpus=corpus, exemplars=(1, 0))
        (result,) = designer.design([DesignTarget("game", SKILL)], step=0)
        assert len(result.attempts) == 5 and not result.valid
        rows = [r for r in memory.attempts(0) if not r.verdict_valid]  # the attempts, not the exemplars
        rng = random.Random(42)
        drawn = [rng.sample(docs, 1)[0]["id"] for _ in range(5)]
        if fresh:
            assert [r.doc_id for r in rows] == drawn
            shown = {p.split("### Example 1")[1][:80] for p in sampler.prompts}
            assert len(shown) > 1  # the exemplar is drawn again too
        else:
            assert [r.doc_id for r in rows] == drawn[:1] * 5 and len(set(sampler.prompts)) == 1


# --------------------------------------------------------------------------------- point 7: the memory


def _round(returns: list[float], hinted: list[float], status=HintStatus.OK) -> Round:
    env = EnvWindow("e", "game", SKILL, status, hint_returns=hinted, hint_wins=[r >= 0.999 for r in hinted])
    for r in returns:
        env.add_play(0, r, r >= 0.999)
    return Round(4, {"e": env}, plays=len(returns), hint_plays=len(hinted))


def test_reference_admission_once_at_the_regeneration_step():
    """_ENV_MEMORY.add after a regeneration step's plays: win rate = share of returns > 0 over that step's
    unhinted plays, regret = mean hinted - mean unhinted (unfloored, 0 when the hint failed); never updated."""
    cfg = SelfPlayConfig(memory=MemoryConfig(admission="reference", seed_from_library=False))
    memory = Memory(":memory:", cfg.memory)
    memory.add(_record("e", SKILL, None))
    rnd = _round([1.0, 0.5, 0.0, -1.0], [1.0, 1.0, 0.5])
    remember(memory, rnd, Recorded(frozenset(), frozenset(), {"e": 7}), 4, cfg)
    rec = memory.get("e")
    assert rec.win_rate_no_hint == 0.5  # 2 of 4 returns above 0 (0.5 counts; a win share would say 0.25)
    assert rec.return_no_hint == pytest.approx(0.125) and rec.regret == pytest.approx(2.5 / 3 - 0.125)
    rnd.envs["e"].add_play(1, 1.0, True)  # a later step: the record stays as admitted
    remember(memory, rnd, Recorded(frozenset(), frozenset(), {"e": 1}), 5, cfg)
    assert memory.get("e") == rec

    memory.add(_record("f", SKILL, None))
    failed = _round([0.0, -1.0], [], HintStatus.MISSING)
    failed.envs = {"f": failed.envs.pop("e")}
    remember(memory, failed, Recorded(frozenset(), frozenset(), {"f": 2}), 4, cfg)
    assert memory.get("f").regret == 0.0 and memory.get("f").win_rate_no_hint == 0.0

    running = SelfPlayConfig(memory=MemoryConfig(seed_from_library=False))  # ours: updated at every step
    memory.add(_record("g", SKILL, None))
    rnd = _round([1.0, 0.0], [1.0, 1.0])
    rnd.envs = {"g": rnd.envs.pop("e")}
    remember(memory, rnd, Recorded(frozenset(), frozenset(), {"g": 4}), 4, running)
    first = memory.get("g").win_rate_no_hint
    rnd.envs["g"].add_play(1, 1.0, True)
    rnd.envs["g"].add_play(1, 1.0, True)
    remember(memory, rnd, Recorded(frozenset(), frozenset(), {"g": 2}), 5, running)
    assert (first, memory.get("g").win_rate_no_hint) == (0.5, 0.75)


# ------------------------------------------------------------------------------------ point 5: plateau


def test_plateau_reads_the_mean_raw_return():
    """recompute_delayed_env_rewards_blend: win_rate = mean of every raw return in the window (partial rewards,
    0 for a truncated play, -1 for a crashing step), then plateau(., 0.4, 0.6, 0.25)."""
    env = EnvWindow("e", "game", SKILL)
    for offset, r in ((0, 0.5), (0, 1.0), (1, -1.0), (2, 0.0), (3, 0.8), (3, 1.0)):
        env.add_play(offset, r, r >= 0.999)
    st = window_stats(env, expected_plays=2, min_plays_fraction=0.0)
    assert st.return_window == pytest.approx(2.3 / 6) and st.win_rate == pytest.approx(2 / 6)
    stats = RegretStats(3, 6, 1.0, 0.75, 1.0, 0.5, regret=0.06, measured=True, return_window=2.3 / 6)
    blend = designer_reward(stats, RewardConfig(plateau_stat="mean_return"))
    assert blend == pytest.approx(0.4 * 0.06 / 0.15 + 0.6 * plateau(2.3 / 6))
    assert designer_reward(stats, RewardConfig()) == pytest.approx(0.4 * 0.4 + 0.6 * plateau(0.5))
