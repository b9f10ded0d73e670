"""Designer bookkeeping without a model: prompt budgeting, valid designs archived, same-batch copies rejected,
repairs fed the gate's reason. A replaying generator stands in for the model (the model path is in
test_selfplay_model.py); the gates run for real in the host pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spade_jax.config.selfplay import DesignerConfig
from spade_jax.envs.contract import contract_examples
from spade_jax.selfplay.corpus import Document
from spade_jax.selfplay.designer import Designer, DesignTarget, PromptParts
from spade_jax.selfplay.memory import Memory

GOOD = "Here is the environment.\n\n```python\n" + contract_examples()["game"] + "```\n"
BROKEN = "```python\nclass Nothing:\n    pass\n```"


@dataclass
class _Completion:
    prompt_ids: list
    token_ids: list
    logprobs: list
    raw_logprobs: list
    text: str
    finish_reason: str = "eos"


class Replay:
    """Returns scripted completions in order (one per prompt), recording the prompts it was given."""

    def __init__(self, tokenizer, texts: list[str], max_total_len: int = 4096):
        self.tok, self.texts, self.max_total_len = tokenizer, list(texts), max_total_len
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            text = self.texts.pop(0)
            ids = self.tok.encode(text, add_special_tokens=False)
            self.prompts.append(list(p))
            out.append(_Completion(list(p), ids, [-0.5] * len(ids), [-0.5] * len(ids), text))
        return out


POOL_WORKERS = 2  # for the `pool` fixture in conftest.py


def test_valid_design_archived_and_same_batch_copy_rejected(pool, tokenizer):
    mem = Memory()
    replay = Replay(tokenizer, [GOOD, GOOD])
    designer = Designer(replay, tokenizer, pool, mem, DesignerConfig(max_new_tokens=512, max_resamples=0))
    results = designer.design([DesignTarget("game", "logical deduction")] * 2, step=5)
    first, second = results
    assert first.valid and first.attempts[0].verdict.gate == "novelty", str(first.attempts[0].verdict)
    assert first.source.strip() == contract_examples()["game"].strip()
    assert not second.valid and second.attempts[0].verdict.gate == "novelty"
    assert "duplicate" in second.attempts[0].verdict.reason
    assert [r.id for r in mem.archive()] == [first.env_id]
    assert mem.get(first.env_id).name == "HigherLower" and mem.get(first.env_id).step == 5


def test_repair_gets_the_reason_and_is_recorded(pool, tokenizer):
    mem = Memory()
    replay = Replay(tokenizer, [BROKEN, GOOD])
    cfg = DesignerConfig(max_new_tokens=512, on_invalid="repair", max_repairs=2)
    designer = Designer(replay, tokenizer, pool, mem, cfg)
    (res,) = designer.design([DesignTarget("game", "logical deduction")], step=1)
    assert [a.valid for a in res.attempts] == [False, True] and res.valid  # stops once valid
    bad = res.attempts[0].verdict
    assert bad.gate in ("extract", "static")
    repair_prompt = tokenizer.decode(replay.prompts[1])
    assert bad.reason in repair_prompt and "class Nothing" in repair_prompt
    rows = mem.attempts()
    assert [r.status for r in rows] == ["invalid", "valid"] and rows[1].parent_id == rows[0].id
    assert rows[1].attempt == 1
    assert res.trainable(cfg) == res.attempts  # repair mode trains every attempt (the invalid one at reward 0)


def test_resample_draws_again_from_the_same_prompt_and_trains_only_valid(pool, tokenizer):
    """The reference's way (defect 10 of issue 16): a failed design is drawn again, without feedback, and only
    valid designs reach the learner."""
    mem = Memory()
    replay = Replay(tokenizer, [BROKEN, BROKEN, GOOD, GOOD])
    cfg = DesignerConfig(max_new_tokens=512, max_resamples=4)
    assert cfg.on_invalid == "resample" and cfg.max_attempts == 5
    designer = Designer(replay, tokenizer, pool, mem, cfg)
    (res,) = designer.design([DesignTarget("game", "logical deduction")], step=1)
    assert [a.valid for a in res.attempts] == [False, False, True] and res.valid
    assert replay.prompts[0] == replay.prompts[1] == replay.prompts[2]  # no repair conversation
    assert res.trainable(cfg) == [res.attempts[-1]]
    assert [r.parent_id for r in mem.attempts()] == [None, None, None]
    with pytest.raises(ValueError, match="on_invalid"):
        DesignerConfig(on_invalid="retry")


def test_prompt_budget_drops_exemplars_then_trims_document(tokenizer):
    mem = Memory()
    mem.seed_from_library()
    cfg = DesignerConfig(max_new_tokens=1024, context_len=4096)
    designer = Designer(Replay(tokenizer, []), tokenizer, None, mem, cfg)
    doc = Document("d1", "The heron waded through the marsh. " * 400, "test")
    pos, neg = mem.positives(2, kind="game"), mem.archive()[:1]
    msgs, ids, parts = designer.fit(PromptParts(DesignTarget("game", "spatial reasoning"), doc, pos, neg))
    assert len(ids) <= 4096 - 1024
    assert parts.positives == [] and parts.negatives == []  # exemplars go first
    assert parts.document is not None and parts.document.truncated
    assert parts.document.text in doc.text and "heron" in tokenizer.decode(ids)
    # roomy context: everything stays
    big = Designer(Replay(tokenizer, [], max_total_len=32768), tokenizer, None, mem,
                   DesignerConfig(max_new_tokens=1024, context_len=32768))  # fmt: skip
    short = Document("d2", "A short note about tides.", "test")
    _, ids2, parts2 = big.fit(PromptParts(DesignTarget("game", "spatial reasoning"), short, list(pos), list(neg)))
    assert len(parts2.positives) == len(pos) and len(parts2.negatives) == 1 and parts2.document == short
    # impossible budget: one clear error
    tiny = Designer(Replay(tokenizer, [], max_total_len=1024), tokenizer, None, mem, DesignerConfig(context_len=1024))
    with pytest.raises(ValueError, match="designer prompt needs"):
        tiny.fit(PromptParts(DesignTarget("game", "x")))
