"""Sampler on a tiny random model with the `tiny` preset's real (byte-level) tokenizer.

References are independent of the sampler: full forward passes of the model over prompt + completion, a numpy
sort-based top-k/top-p, and each prompt run alone.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from spade_jax.model.loading import load_model
from spade_jax.model.transformer import Transformer
from spade_jax.sampling import Sampler, SamplingParams

PROMPTS = ["Hello world", "x", "The quick brown fox jumps over the lazy dog. " * 2, "a b c d", "1234567890" * 5]


def make_model(seed: int = 0, **overrides):
    """Untied tiny llama over the byte tokenizer, with a scaled-up head so generations are varied ASCII text."""
    cfg, _, tok = load_model("tiny")
    cfg = cfg.replace(vocab_size=tok.vocab_size, tie_embeddings=False, **overrides)
    model = Transformer(cfg, rngs=nnx.Rngs(seed))
    w = np.asarray(model.lm_head.kernel[...]) * 25
    w[:, 128:] *= 0.1  # rarely emit non-ASCII bytes or control tokens
    w[:, :32] *= 0.1
    model.lm_head.kernel[...] = w
    return model, tok


@pytest.fixture(scope="module")
def setup():
    model, tok = make_model()
    return model, tok, Sampler(model, tok, max_total_len=256, chunk_steps=8)


@functools.cache
def _forward(graphdef):
    return jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids)[0])


def full_logits(model, ids: list[int]) -> np.ndarray:
    """Logits of one plain forward pass (no cache) over ids, right-padded to 256 so one program serves all."""
    graphdef, state = nnx.split(model)
    padded = np.zeros((1, 256), np.int32)
    padded[0, : len(ids)] = ids
    return np.asarray(_forward(graphdef)(state, padded)[0, : len(ids)], np.float64)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def reference_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """HF order: temperature, top-k (ties kept), top-p over the renormalised rest (sort based)."""
    z = logits / temperature
    if top_k > 0:
        z = np.where(z >= np.sort(z)[::-1][top_k - 1], z, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        keep = np.zeros(p.shape, bool)
        keep[order[(np.cumsum(p[order]) - p[order]) < top_p]] = True
        p = np.where(keep, p, 0.0) / p[keep].sum()
    return p


def test_batched_rows_equal_each_row_alone(setup):
    model, tok, sampler = setup
    params = SamplingParams(max_new_tokens=30, greedy=True, ignore_eos=True)
    batched = sampler.generate(PROMPTS, params)
    for prompt, got in zip(PROMPTS, batched):
        alone = sampler.generate([prompt], params)[0]
        assert got.token_ids == alone.token_ids
        np.testing.assert_allclose(got.raw_logprobs, alone.raw_logprobs, atol=1e-5)
        assert got.prompt_ids == tok.encode(prompt) and got.finish_reason == "length"
        # greedy: every token is the argmax of a separate full forward over prompt + completion
        logits = full_logits(model, got.prompt_ids + got.token_ids)[len(got.prompt_ids) - 1 : -1]
        assert got.token_ids == logits.argmax(-1).tolist()


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.8, 0, 1.0), (0.7, 20, 0.9), (1.2, 0, 0.6)])
def test_logprobs_equal_a_full_forward_and_filters_hold(setup, temperature, top_k, top_p):
    model, _, sampler = setup
    params = SamplingParams(max_new_tokens=40, temperature=temperature, top_k=top_k, top_p=top_p, seed=3)
    for c in sampler.generate(PROMPTS, params):
        assert len(c.token_ids) == len(c.logprobs) == len(c.raw_logprobs) > 0
        logits = full_logits(model, c.prompt_ids + c.token_ids)[len(c.prompt_ids) - 1 : -1]
        steps = np.arange(len(c.token_ids))
        np.testing.assert_allclose(c.raw_logprobs, log_softmax(logits)[steps, c.token_ids], atol=1e-4)
        want = np.stack([reference_probs(row, temperature, top_k, top_p) for row in logits])
        assert (want[steps, c.token_ids] > 0).all(), "a token outside the top-k / top-p set was sampled"
        np.testing.assert_allclose(c.logprobs, np.log(want[steps, c.token_ids]), atol=1e-4)


def test_first_token_frequencies_match_the_intended_distribution(setup):
    model, tok, sampler = setup
    temperature, top_k, top_p = 1.5, 8, 0.95
    prompt = tok.encode("The quick brown")
    want = reference_probs(full_logits(model, prompt)[-1], temperature, top_k, top_p)
    counts = np.zeros(want.shape[0])
    params = dict(max_new_tokens=1, temperature=temperature, top_k=top_k, top_p=top_p, ignore_eos=True)
    for seed in range(40):
        for c in sampler.generate([prompt] * 64, SamplingParams(seed=seed, **params)):
            counts[c.token_ids[0]] += 1
    assert counts[want == 0].sum() == 0
    keep = want > 0
    n = counts.sum()
    chi2 = ((counts[keep] - n * want[keep]) ** 2 / (n * want[keep])).sum()
    assert stats.chi2.sf(chi2, keep.sum() - 1) > 1e-4, (counts[keep], n * want[keep])


def test_seeds_reproduce_and_differ(setup):
    _, _, sampler = setup
    a = sampler.generate(PROMPTS[:2], SamplingParams(max_new_tokens=20, temperature=1.0, seed=7))
    b = sampler.generate(PROMPTS[:2], SamplingParams(max_new_tokens=20, temperature=1.0, seed=7))
    c = sampler.generate(PROMPTS[:2], SamplingParams(max_new_tokens=20, temperature=1.0, seed=8))
    assert [x.token_ids for x in a] == [x.token_ids for x in b] != [x.token_ids for x in c]


def test_stop_tokens_and_stop_strings(setup):
    _, tok, sampler = setup
    prompt = "The quick brown fox"
    ref = sampler.generate([prompt], SamplingParams(max_new_tokens=40, greedy=True, ignore_eos=True))[0].token_ids
    # a stop token: generation ends on it, the token is returned, the text leaves it out
    i = next(i for i in range(3, 40) if ref[i] not in ref[:i])
    c = sampler.generate([prompt], SamplingParams(max_new_tokens=40, greedy=True, stop_token_ids=(ref[i],)))[0]
    assert c.token_ids == ref[: i + 1] and c.finish_reason == "eos" and c.text == tok.decode(ref[:i])
    # a short stop string, matched on device by its token sequence: the text ends right after it
    text = tok.decode(ref)
    s = tok.decode(ref[5:8])
    end = text.find(s) + len(s)
    c = sampler.generate([prompt], SamplingParams(max_new_tokens=40, greedy=True, stop_strings=("\x00zz", s)))[0]
    assert c.finish_reason == "stop_string" and c.stop == s and c.extra.get("stop_check") == "device"
    assert c.text == text[:end] and tok.decode(c.token_ids) == text[:end] and c.token_ids == ref[: len(c.token_ids)]
    assert len(c.logprobs) == len(c.token_ids)
    # a long stop string (longer than the device matcher takes) is found on the host between chunks
    s = tok.decode(ref[10:28])
    end = text.find(s) + len(s)
    c = sampler.generate([prompt], SamplingParams(max_new_tokens=40, greedy=True, stop_strings=(s,)))[0]
    assert c.finish_reason == "stop_string" and c.extra.get("stop_check") == "host" and c.text == text[:end]
    assert c.token_ids == ref[: len(c.token_ids)] and tok.decode(c.token_ids) == text[:end]


def test_context_budget_overflow_and_truncation():
    model, tok = make_model()
    sampler = Sampler(model, tok, max_total_len=64, chunk_steps=8)
    prompt = list(range(40, 100))  # 60 tokens
    c = sampler.generate([prompt], SamplingParams(max_new_tokens=20, greedy=True, ignore_eos=True))[0]
    assert len(c.token_ids) == 4 and c.finish_reason == "context"
    with pytest.raises(ValueError, match="max_total_len"):
        sampler.generate([list(range(40, 104))], SamplingParams(max_new_tokens=4))
    left = Sampler(model, tok, max_total_len=64, chunk_steps=8, overflow="truncate_left")
    c = left.generate([list(range(30, 110))], SamplingParams(max_new_tokens=10, greedy=True, ignore_eos=True))[0]
    assert c.prompt_ids == list(range(56, 110)) and len(c.token_ids) == 10
    assert c.extra["truncated_prompt_tokens"] == 26
    with pytest.raises(ValueError, match="vocabulary"):
        sampler.generate([[5, 100000]], SamplingParams())


def test_compile_count_is_bounded_over_random_length_prompts():
    model, tok = make_model()
    sampler = Sampler(model, tok, max_total_len=512, chunk_steps=16)
    rng = np.random.default_rng(0)

    def run(n: int) -> None:
        for _ in range(n):
            prompt = rng.integers(32, 127, size=int(rng.integers(1, 300))).tolist()
            params = SamplingParams(
                max_new_tokens=int(rng.integers(1, 48)), temperature=1.0, seed=int(rng.integers(99))
            )
            (c,) = sampler.generate([prompt], params)
            assert 1 <= len(c.token_ids) <= params.max_new_tokens

    run(50)
    # untied head (no head transpose): a prefill per prompt bucket up to 384 (32, 48, ..., 384: 8), a decode and a
    # grow per cache length up to 300 + 48 (64, 96, ..., 384: 6), and the batch-1 transposed kernels once
    prompt = [n for n in sampler.prompt_buckets if n <= 384]
    cache = [n for n in sampler.cache_buckets if n <= 384]
    assert (len(prompt), len(cache)) == (8, 6)
    assert sampler.compile_count <= len(prompt) + 2 * len(cache) + 1, sorted(sampler._rt.programs, key=str)
    before = sampler.compile_count
    run(15)
    assert sampler.compile_count == before


def test_sampling_settings_are_traced_never_a_program_key(setup):
    """A self-play step samples under several settings at the same shapes: the designer's and the agent's (the
    paper's T 0.6, top-k 20, top-p 0.95), the hints' (top-p only), greedy evaluation, plain sampling, top-k alone,
    and rows of all of these in one batch. After the first, none compiles a program (issue 46: keyed by mode,
    each would have compiled its own decode program per batch and cache shape)."""
    model, tok, _ = setup
    sampler = Sampler(model, tok, max_total_len=256, chunk_steps=8)
    settings = [dict(temperature=0.6, top_k=20, top_p=0.95), dict(temperature=0.3, top_p=0.9), dict(greedy=True),
                dict(temperature=1.0), dict(temperature=0.8, top_k=5)]  # fmt: skip
    sampler.generate(PROMPTS[:3], SamplingParams(max_new_tokens=12, ignore_eos=True, **settings[0]))
    compiled = dict(sampler._rt.programs)
    for kw in settings[1:]:
        sampler.generate(PROMPTS[:3], SamplingParams(max_new_tokens=12, ignore_eos=True, **kw))
    mixed = [sampler.submit(p, SamplingParams(max_new_tokens=12, ignore_eos=True, **kw), index=i)
             for i, (p, kw) in enumerate(zip(PROMPTS[:3], settings[1:4]))]  # fmt: skip
    while sampler.pending:  # one batch of rows under three settings
        sampler.step()
    assert all(len(r.completion.token_ids) == 12 for r in mixed)
    assert sampler._rt.programs.keys() == compiled.keys(), sorted(set(sampler._rt.programs) - set(compiled), key=str)
    assert sum(key[0] == "decode" for key in compiled) >= 1


def test_update_model_swaps_parameters_without_recompiling(setup):
    model, tok, _ = setup
    sampler = Sampler(model, tok, max_total_len=256, chunk_steps=8)
    params = SamplingParams(max_new_tokens=12, greedy=True, ignore_eos=True)
    first = sampler.generate(PROMPTS[:3], params)
    compiled = sampler.compile_count
    other, _ = make_model(seed=1)
    sampler.update_model(other)
    second = sampler.generate(PROMPTS[:3], params)
    assert sampler.compile_count == compiled
    assert [c.token_ids for c in first] != [c.token_ids for c in second]
    for c in second:
        logits = full_logits(other, c.prompt_ids + c.token_ids)[len(c.prompt_ids) - 1 : -1]
        assert c.token_ids == logits.argmax(-1).tolist()


def test_chat_renders_the_template_and_reports_progress(setup):
    _, tok, sampler = setup
    conv = [{"role": "user", "content": "What is 2 + 2?"}]
    seen = []
    (c,) = sampler.chat([conv], SamplingParams(max_new_tokens=20, greedy=True), progress=lambda n, m: seen.append(n))
    rendered = tok.apply_chat_template(conv, add_generation_prompt=True)
    assert c.prompt_ids == tok.encode(rendered, add_special_tokens=False)
    assert seen and seen[-1] == len(c.token_ids)
    # continuing a conversation from a previous completion's ids
    more = sampler.generate([c.full_ids + tok.encode(" and", add_special_tokens=False)], SamplingParams(greedy=True))
    assert more[0].prompt_ids[: len(c.full_ids)] == c.full_ids


def test_bfloat16_weights_decode_like_a_full_forward():
    """bfloat16 weights, float32 compute: decoding (one row alone, with the transposed batch-1 kernels, and a
    batch) gives the log-probs of a full forward pass, whose Linears make the same bfloat16 matmuls."""
    model, tok = make_model(seed=1, param_dtype="bfloat16", dtype="float32")
    assert model.layer(0).mlp.up_proj.kernel[...].dtype == np.dtype("bfloat16")
    # 1e-3: XLA:CPU picks its matmul kernels by shape and by the CPU (e.g. AVX-512 machines differ from AVX2 ones
    # by 3e-4 here), and a bfloat16 weight times a float32 activation is reduced in a kernel-dependent order; a
    # wrong cache column or position is off by 0.1 or more.
    for want in _alone_and_batched_vs_full_forward(model, tok, PROMPTS[:3], max_new_tokens=24, seed=5, atol=1e-3):
        assert want.std() > 0.1  # varied tokens, not one repeated


@pytest.mark.parametrize("overrides", [dict(arch="qwen2", qkv_bias=True), dict(arch="qwen3", qk_norm=True)])
def test_qkv_bias_and_qk_norm_decode_like_a_full_forward(overrides):
    """The stacked batch-1 kernels split back into q, k, v with their own biases (qwen2) and norms (qwen3)."""
    model, tok = make_model(seed=2, **overrides)
    rng = np.random.default_rng(0)
    for layer in [model.layers] if model.scanned else model.layers:  # stacked: one Block holds every layer's
        for lin in (layer.attn.q_proj, layer.attn.k_proj, layer.attn.v_proj):
            if lin.use_bias:
                lin.bias[...] = rng.normal(0, 0.5, lin.bias.shape).astype(np.float32)
    _alone_and_batched_vs_full_forward(model, tok, PROMPTS[:2], max_new_tokens=16, seed=4)


def _alone_and_batched_vs_full_forward(
    model, tok, prompts, *, max_new_tokens: int, seed: int, atol: float = 1e-4
) -> list[np.ndarray]:
    """Samples each prompt alone (the batch-1 path) and all together; every completion's raw log-probs must equal
    a full forward's within `atol`. Returns those reference log-probs."""
    sampler = Sampler(model, tok, max_total_len=256, chunk_steps=8)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)
    alone = [sampler.generate([p], params)[0] for p in prompts]
    wants = []
    for c in alone + sampler.generate(prompts, params):
        logits = full_logits(model, c.prompt_ids + c.token_ids)[len(c.prompt_ids) - 1 : -1]
        wants.append(log_softmax(logits)[np.arange(len(c.token_ids)), c.token_ids])
        np.testing.assert_allclose(c.raw_logprobs, wants[-1], atol=atol)
    return wants


SHARED = "You write small puzzle games. Every game is one class with reset and step; keep it short. " * 2
SUFFIXES = ["Write a maze.", "Write a sliding puzzle with five tiles.", "Sonar.", "Write a word ladder game, please."]


def test_shared_prefix_prefill_equals_a_full_prefill(setup):
    """The prefix's one-row KV placed at each row's own slots, then only the later chunks computed, gives the
    logits and cache of a prefill from scratch."""
    import jax.numpy as jnp

    from spade_jax.sampling.prefill import prefill, prefix_kv

    model, tok, _ = setup
    rows = [tok.encode(SHARED + s) for s in SUFFIXES]
    shared = 128
    assert all(r[:shared] == rows[0][:shared] for r in rows)
    p = 256
    tokens = np.zeros((len(rows), p), np.int32)
    pad = np.array([p - len(r) for r in rows], np.int32)
    for i, r in enumerate(rows):
        tokens[i, pad[i] :] = r
    prefix_tokens = np.zeros((1, 192), np.int32)  # right-padded past the shared part, as the sampler does
    prefix_tokens[0, :shared] = rows[0][:shared]
    fresh = nnx.jit(lambda m, t, pl: prefill(m, t, pl, cache_len=p))
    reused = nnx.jit(lambda m, t, pl, kv, s: prefill(m, t, pl, cache_len=p, prefix=kv, start=s))
    want_logits, want_cache = fresh(model, jnp.asarray(tokens), jnp.asarray(pad))
    kv = nnx.jit(prefix_kv)(model, jnp.asarray(prefix_tokens))
    start = int(pad.min()) + shared
    got_logits, got_cache = reused(model, jnp.asarray(tokens), jnp.asarray(pad), kv, jnp.int32(start))
    np.testing.assert_allclose(np.asarray(got_logits), np.asarray(want_logits), atol=1e-5)
    for i in range(len(rows)):  # every real slot of every row and layer
        for got, want in zip(got_cache.k + got_cache.v, want_cache.k + want_cache.v):
            g, w = np.asarray(got)[i], np.asarray(want)[i]
            sl = (slice(None), slice(None), slice(pad[i], p)) if g.shape[-1] == p else (slice(None), slice(pad[i], p))
            np.testing.assert_allclose(g[sl], w[sl], atol=1e-5)


def test_sampler_shares_prefixes_and_drops_them_on_update_model(setup):
    model, tok, _ = setup
    params = SamplingParams(max_new_tokens=16, greedy=True, ignore_eos=True)
    prompts = [SHARED + s for s in SUFFIXES]
    plain = Sampler(model, tok, max_total_len=256, chunk_steps=8, min_shared_prefix=0)
    # min_reuse=0: the later call must find the kept prefix, not the rows the first call left in their slots
    sharing = Sampler(model, tok, max_total_len=256, chunk_steps=8, min_shared_prefix=64, min_prefix_saving=0,
                      min_reuse=0)  # fmt: skip
    want = plain.generate(prompts, params)
    got = sharing.generate(prompts, params)
    assert sharing.prefix_tokens_reused == 128 * (len(prompts) - 1) and plain.prefix_tokens_reused == 0
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.raw_logprobs, w.raw_logprobs, atol=1e-5)
    # a later call with other suffixes reuses the cached prefix (no new prefix program, no new prefill of it)
    compiled = sharing.compile_count
    again = sharing.generate([SHARED + s[::-1] for s in SUFFIXES], params)
    assert sharing.compile_count == compiled and sharing.prefix_tokens_reused == 2 * 128 * (len(prompts) - 1)
    assert [c.token_ids for c in again] == [
        c.token_ids for c in plain.generate([SHARED + s[::-1] for s in SUFFIXES], params)
    ]
    # new weights: the old prefix KV must not be reused (it would give the old model's continuation)
    other, _ = make_model(seed=1)
    sharing.update_model(other)
    for c in sharing.generate(prompts, params):
        logits = full_logits(other, c.prompt_ids + c.token_ids)[len(c.prompt_ids) - 1 : -1]
        assert c.token_ids == logits.argmax(-1).tolist()


def test_a_prefix_is_shared_only_where_it_spares_enough_tokens(setup):
    model, tok, _ = setup
    params = SamplingParams(max_new_tokens=2, greedy=True, ignore_eos=True)
    prompts = [SHARED + s for s in SUFFIXES]
    spared = 128 * (len(prompts) - 1)  # the shared length (rounded to 64) times the rows that skip it
    below = Sampler(model, tok, max_total_len=256, chunk_steps=8, min_shared_prefix=64, min_prefix_saving=spared + 1)
    at = Sampler(model, tok, max_total_len=256, chunk_steps=8, min_shared_prefix=64, min_prefix_saving=spared)
    below.generate(prompts, params)
    at.generate(prompts, params)
    assert below.prefix_tokens_reused == 0 and at.prefix_tokens_reused == spared


def test_slot_steps_count_every_row_computed_and_tokens_only_those_returned(setup):
    """Slot utilisation = tokens returned / (decode steps x batch rows): padding rows of the batch bucket and
    rows that finished early cost slot-steps but return nothing (the per-turn barrier's waste)."""
    _, tok, sampler = setup
    rows = min(b for b in sampler.batch_buckets if b >= 3)  # 3 prompts padded to the bucket's rows
    slots0, tokens0 = sampler.slot_steps, sampler.tokens_generated
    out = sampler.generate(["one", "two words", "three words here"], SamplingParams(max_new_tokens=20, greedy=True,
                                                                                  ignore_eos=True))  # fmt: skip
    assert [len(c.token_ids) for c in out] == [20, 20, 20]
    assert sampler.tokens_generated - tokens0 == 60
    assert sampler.slot_steps - slots0 == rows * 20  # 20 steps (chunks of 8, 8, 4) for every row of the bucket
