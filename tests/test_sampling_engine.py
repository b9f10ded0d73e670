"""The continuous-batching engine on a tiny random model: requests admitted at different times into a shared
batch give what each gives alone, runs reproduce bit for bit, freed slots keep nothing of their old rows,
column shifts and cache growth change nothing, and rows reused for a continuation give a fresh prefill's
values until `update_model` drops them.

References: each prompt generated alone on a fresh sampler, and plain forward passes of the model.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_sampling_tiny import full_logits, log_softmax, make_model

from spade_jax.sampling import Sampler, SamplingParams

PROMPTS = ["Hello world", "x", "The quick brown fox jumps over the lazy dog. " * 2, "a b c d", "1234567890" * 5,
           "Once upon a time", "zzz " * 9, "Q: what is two plus two? A:"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    return make_model()


def _sampler(model, tok, **kw) -> Sampler:
    return Sampler(model, tok, **{"max_total_len": 256, "chunk_steps": 8, **kw})


def _schedule(sampler: Sampler, plan: list[tuple[int, str, SamplingParams]]) -> list:
    """Submits (at engine step, prompt, params) in order, stepping between; returns the completions in
    plan order. Request i draws from stream i of its params' seed."""
    reqs, step, pending = [], 0, list(plan)
    while pending or sampler.pending:
        while pending and pending[0][0] <= step:
            _, prompt, params = pending.pop(0)
            reqs.append(sampler.submit(prompt, params, index=len(reqs)))
        sampler.step()
        step += 1
    return [r.completion for r in reqs]


def _alone(model, tok, plan, **kw) -> list:
    """Each planned request on a fresh sampler of its own, with the same random stream."""
    out = []
    for n, (_, prompt, params) in enumerate(plan):
        s = _sampler(model, tok, **kw)
        req = s.submit(prompt, params, index=n)
        while not req.done:
            s.step()
        out.append(req.completion)
    return out


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, greedy=True, ignore_eos=True)


def test_requests_admitted_at_different_times_equal_each_alone(tiny):
    model, tok = tiny
    lengths = [(0, 0, 30), (0, 2, 5), (1, 1, 17), (2, 4, 40), (3, 3, 9), (7, 5, 12), (7, 6, 25), (9, 7, 3)]
    plan = [(step, PROMPTS[i], _greedy(n)) for step, i, n in lengths]
    sampler = _sampler(model, tok, decode_slots=4)
    got = _schedule(sampler, plan)
    for g, w, (*_, params) in zip(got, _alone(model, tok, plan), plan):
        assert g.token_ids == w.token_ids and len(g.token_ids) == params.max_new_tokens
        np.testing.assert_allclose(g.raw_logprobs, w.raw_logprobs, atol=1e-5)
        logits = full_logits(model, g.prompt_ids + g.token_ids)[len(g.prompt_ids) - 1 : -1]
        assert g.token_ids == logits.argmax(-1).tolist()
    assert sampler.engine.rows.batch <= 4 and sampler.tokens_generated == sum(p.max_new_tokens for *_, p in plan)


def test_rows_of_different_settings_share_a_batch_and_sample_like_alone(tiny):
    """Per-row temperature / top-k / top-p / greedy / stops in one batch; a row's draws come from its own stream,
    so each equals its run alone, and its log-probs are those of the distribution it was drawn from."""
    model, tok = tiny
    settings = [dict(temperature=0.8), dict(temperature=0.7, top_k=20, top_p=0.9), dict(greedy=True),
                dict(temperature=1.2, top_p=0.6), dict(temperature=1.0, top_k=5),
                dict(temperature=0.9, seed=4, stop_strings=("e ",))]  # fmt: skip
    plan = [
        (k % 3, PROMPTS[k], SamplingParams(**{"max_new_tokens": 24, "seed": 3, **kw})) for k, kw in enumerate(settings)
    ]
    got = _schedule(_sampler(model, tok), plan)
    for g, w in zip(got, _alone(model, tok, plan)):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-5)
        logits = full_logits(model, g.prompt_ids + g.token_ids)[len(g.prompt_ids) - 1 : -1]
        steps = np.arange(len(g.token_ids))
        np.testing.assert_allclose(g.raw_logprobs, log_softmax(logits)[steps, g.token_ids], atol=1e-4)
    assert got[2].logprobs == [0.0] * len(got[2].token_ids)


def test_sampled_runs_reproduce_bit_for_bit(tiny):
    model, tok = tiny
    plan = [(k // 2, PROMPTS[k], SamplingParams(max_new_tokens=8 + 5 * k, temperature=1.0, top_p=0.95, seed=11))
            for k in range(len(PROMPTS))]  # fmt: skip
    a = _schedule(_sampler(model, tok, decode_slots=4), plan)
    b = _schedule(_sampler(model, tok, decode_slots=4), plan)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.logprobs for c in a] == [c.logprobs for c in b] and [c.raw_logprobs for c in a] == [
        c.raw_logprobs for c in b
    ]


def test_a_reused_slot_keeps_nothing_of_its_old_row(tiny):
    model, tok = tiny
    sampler = _sampler(model, tok, decode_slots=1, min_reuse=0)
    first = sampler.generate([PROMPTS[4]], _greedy(60))[0]  # a long row fills the slot's columns
    second = sampler.generate([PROMPTS[1]], _greedy(20))[0]  # a short prompt in the same slot after it
    fresh = _sampler(model, tok).generate([PROMPTS[1]], _greedy(20))[0]
    assert second.token_ids == fresh.token_ids and first.token_ids != second.token_ids
    np.testing.assert_allclose(second.raw_logprobs, fresh.raw_logprobs, atol=1e-5)
    # while the long row still runs, a short one joins it and another takes the slot a finished row freed
    plan = [(0, PROMPTS[4], _greedy(50)), (0, PROMPTS[0], _greedy(4)), (1, PROMPTS[1], _greedy(30))]
    got = _schedule(_sampler(model, tok, decode_slots=2, min_reuse=0), plan)
    for g, w in zip(got, _alone(model, tok, plan)):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.raw_logprobs, w.raw_logprobs, atol=1e-5)


def test_column_shifts_and_cache_growth_change_nothing(tiny):
    """A long row forces the cache to grow and its columns to move left; a long prompt admitted while a short
    one runs moves them right (its block needs more columns left of the write column)."""
    model, tok = tiny
    long_prompt = "".join(chr(65 + (i * 7) % 26) for i in range(150))
    plan = [(0, PROMPTS[1], _greedy(120)), (2, long_prompt, _greedy(40)), (3, PROMPTS[0], _greedy(60)),
            (12, PROMPTS[3], _greedy(50))]  # fmt: skip
    sampler = _sampler(model, tok, decode_slots=4)
    got = _schedule(sampler, plan)
    moves = sampler.engine.stats
    assert moves["move_left"] and moves["move_right"], moves
    for g, w in zip(got, _alone(model, tok, plan)):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.raw_logprobs, w.raw_logprobs, atol=1e-5)


def _run(sampler: Sampler, prompts: list, params: SamplingParams, expect: int = 0) -> list:
    """Submits the prompts and steps until they are done (`expect`: tell the engine more will come)."""
    reqs = [sampler.submit(p, params, index=i) for i, p in enumerate(prompts)]
    while not all(r.done for r in reqs):
        sampler.step(expect=expect)
    return [r.completion for r in reqs]


def test_a_continuation_reuses_its_rows_and_update_model_drops_them(tiny):
    model, tok = tiny
    sampler = _sampler(model, tok, min_reuse=16)
    plain = _sampler(model, tok, min_reuse=0)
    turn = _run(sampler, PROMPTS[2:4], _greedy(20), expect=2)  # the conversations go on: their rows are kept
    nexts = [c.full_ids + tok.encode(" and then", add_special_tokens=False) for c in turn]
    got = _run(sampler, nexts, _greedy(20), expect=2)
    assert sampler.engine.tokens_reused == sum(len(c.full_ids) for c in turn)  # only the new tokens prefilled
    want = plain.generate(nexts, _greedy(20))
    assert plain.engine.tokens_reused == 0
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.raw_logprobs, w.raw_logprobs, atol=1e-5)
    # new weights: the parked rows hold the old model's keys and values and must not be reused
    other, _ = make_model(seed=1)
    sampler.update_model(other)
    reused = sampler.engine.tokens_reused
    for c in _run(sampler, [g.full_ids + [40] for g in got], _greedy(10)):
        logits = full_logits(other, c.prompt_ids + c.token_ids)[len(c.prompt_ids) - 1 : -1]
        assert c.token_ids == logits.argmax(-1).tolist()
    assert sampler.engine.tokens_reused == reused
    # a unit of work that ends (generate, or forget) keeps nothing for the next: a resumed run starts the same
    sampler.generate(nexts, _greedy(3))
    assert not sampler.engine.parked and sampler.engine.cache is None
    sampler.submit(PROMPTS[0], _greedy(4))
    with pytest.raises(RuntimeError, match="still queued or running"):
        sampler.update_model(model)
    sampler.cancel()
    sampler.update_model(model)


def test_the_batch_shrinks_at_the_tail(tiny):
    """Slot-steps follow the rows still running: a long row left alone decodes in a batch of one."""
    model, tok = tiny
    sampler = _sampler(model, tok)
    s0, t0 = sampler.slot_steps, sampler.tokens_generated
    mixed = [SamplingParams(max_new_tokens=n, greedy=True, ignore_eos=True) for n in (4, 4, 4, 64)]
    reqs = [sampler.submit(PROMPTS[i], mixed[i], index=i) for i in range(4)]
    while sampler.pending:
        sampler.step()
    assert [len(r.completion.token_ids) for r in reqs] == [4, 4, 4, 64]
    assert sampler.tokens_generated - t0 == 76
    assert sampler.slot_steps - s0 < 4 * 64 // 2  # not 4 rows x 64 steps


def test_eager_steps_hand_finished_rows_back_at_once(tiny):
    """With `eager` (the rollout loop: a reply is followed by the episode's next turn) a chunk ends as soon as a
    row is done, so a short reply comes back before a long one finishes; the tokens are the same either way."""
    model, tok = tiny
    params = [SamplingParams(max_new_tokens=n, greedy=True, ignore_eos=True) for n in (3, 30)]
    got = {}
    for eager in (False, True):
        sampler = _sampler(model, tok, chunk_steps=32)
        reqs = [sampler.submit(PROMPTS[i], params[i], index=i) for i in range(2)]
        first = sampler.step(eager=eager)
        got[eager] = [len(r.completion.token_ids) for r in first], reqs
        while sampler.pending:
            sampler.step(eager=eager)
    assert got[False][0] == [3, 30]  # one chunk runs until every row is done
    assert got[True][0] == [3]  # handed back after its third token, the long row still running
    for a, b in zip(got[False][1], got[True][1]):
        assert a.completion.token_ids == b.completion.token_ids
