"""The decode step's attention (issue 46, points 2 to 4): the Pallas kernel that reads each row's live KV slots
only, run in Pallas interpret mode on this CPU (its Triton lowering runs only on a GPU: benchmarks/device_check.py),
against the XLA path and a float64 softmax written here; the sampler decoding with it; the live share of KV reads
counted by hand; and, from the optimised HLO of a bfloat16 decode loop, no float32 weight or KV copy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.config.run import DECODE_ATTENTION
from spade_jax.infra import hlo
from spade_jax.model import decode_attention as da
from spade_jax.model.kv_cache import DecodeLayouts, KVCache
from spade_jax.model.presets import load_preset
from spade_jax.model.transformer import Transformer


def reference(q, parts, head_dim: int) -> np.ndarray:
    """softmax(q k / sqrt(D)) v over every valid slot of every part, float64, per (row, KV head, query head)."""
    q = np.asarray(q, np.float64)
    keys = np.concatenate([np.asarray(k, np.float64) for k, _, _ in parts], axis=-1)  # [B, K, D, S]
    values = np.concatenate([np.asarray(v, np.float64) for _, v, _ in parts], axis=-2)  # [B, K, S, D]
    valid = np.concatenate([np.asarray(m) for _, _, m in parts], axis=-1)  # [B, S]
    s = np.einsum("bkgd,bkds->bkgs", q, keys) / np.sqrt(head_dim)
    s = np.where(valid[:, None, None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bkgs,bksd->bkgd", p / p.sum(-1, keepdims=True), values)


def _parts(rng, dtype, slots: int, width: int):
    """A cache part of `slots` columns and a chunk part of `width`, rows left-padded differently: one attends
    the whole cache, one a part of it, one a single cache slot, one no cache slot at all (a fresh row)."""
    b, k, g, d = 4, 2, 3, 16
    q = jnp.asarray(rng.normal(size=(b, k, g, d)), dtype)
    cache_k, cache_v = (jnp.asarray(rng.normal(size=shape), dtype) for shape in ((b, k, d, slots), (b, k, slots, d)))
    chunk_k, chunk_v = (jnp.asarray(rng.normal(size=shape), dtype) for shape in ((b, k, d, width), (b, k, width, d)))
    pad = np.asarray([0, 17, slots - 4, slots - 3])
    first = slots - 3  # the cache column of the chunk's first token
    cols = np.arange(slots)
    valid = (cols[None] >= pad[:, None]) & (cols[None] < first)
    own = np.broadcast_to(np.arange(width) <= 5, (b, width))  # chunk slot 5 is this step's
    return q, [(cache_k, cache_v, jnp.asarray(valid)), (chunk_k, chunk_v, jnp.asarray(own))], d


# GPU kernel: 3 splits of 32; 16 of 64 with an XLA-path chunk. TPU kernel (Mosaic, in TPU interpret mode here): 8
# blocks of 128 with an XLA-path chunk; 2 blocks beside a 128-slot chunk it also runs.
CASES = [("gpu", 96, 32), ("gpu", 1024, 8), ("tpu", 1024, 8), ("tpu", 256, 128)]


@pytest.mark.parametrize("backend,slots,width", CASES)
def test_the_kernel_reads_live_slots_and_equals_the_xla_path(backend, slots, width):
    rng = np.random.default_rng(slots)
    q, parts, d = _parts(rng, jnp.float32, slots, width)
    want = reference(q, parts, d)
    xla = np.asarray(jax.jit(lambda q, p: da.attend(q, p, d, "xla"))(q, parts))
    kernel = np.asarray(jax.jit(lambda q, p: da.attend(q, p, d, "pallas", backend=backend))(q, parts))
    np.testing.assert_allclose(xla, want, atol=2e-6)
    np.testing.assert_allclose(kernel, want, atol=2e-6)
    # bfloat16 caches: both within bfloat16 rounding of the float64 softmax of the same (rounded) inputs
    q16, parts16, _ = _parts(rng, jnp.bfloat16, slots, width)
    want16 = reference(q16, parts16, d)
    for impl in ("xla", "pallas"):
        attend = jax.jit(lambda q, p, impl=impl: da.attend(q, p, d, impl, backend=backend))
        np.testing.assert_allclose(np.asarray(attend(q16, parts16), np.float64), want16, atol=3e-2, err_msg=impl)


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_slots_outside_a_rows_run_never_reach_its_output(backend):
    """NaN in every slot a row does not attend (left padding, unwritten columns; blocks at a run's edges hold
    some) leaves the kernel's output equal to attending the valid slots alone."""
    rng = np.random.default_rng(7)
    q, parts, d = _parts(rng, jnp.float32, 256, 32)
    (ck, cv, valid), chunk = parts
    poisoned = (jnp.where(valid[:, None, None, :], ck, jnp.nan), jnp.where(valid[:, None, :, None], cv, jnp.nan), valid)
    got = np.asarray(jax.jit(lambda q, p: da.attend(q, p, d, "pallas", backend=backend))(q, [poisoned, chunk]))
    np.testing.assert_allclose(got, reference(q, parts, d), atol=2e-6)


def test_every_cache_bucket_of_a_long_context_splits_into_kernel_blocks():
    from spade_jax.sampling import buckets

    for slots in buckets.length_buckets(2 * 32768 + 32768, smallest=64):
        splits, block = da.blocking(slots)
        assert block in (16, 32, 64) and slots % (splits * block) == 0 and 1 <= splits <= da.MAX_SPLITS, slots
    assert da.blocking(8) is None and da.blocking(24) is None  # the XLA path takes these parts
    assert da.tpu_blocking(1024) == 128 and da.tpu_blocking(96) is None  # on TPU, lane-wide blocks only
    start, end = (np.asarray(x).tolist() for x in da.run_of(jnp.asarray([[False, True, True, False], [False] * 4])))
    assert (start, end) == ([1, 0], [3, 0])


def test_the_choices_are_one_list_and_a_bad_name_is_refused():
    from spade_jax.config.overrides import ConfigError
    from spade_jax.config.run import RunConfig
    from spade_jax.sampling import Sampler

    assert DECODE_ATTENTION == da.IMPLS
    assert da.resolve("auto") == ("pallas" if jax.default_backend() in ("gpu", "tpu") else "xla")
    with pytest.raises(ValueError, match="expected one of xla, pallas, auto"):
        da.check("flash")
    with pytest.raises(ConfigError, match="decode_attention='flash'"):
        RunConfig(decode_attention="flash")
    model = Transformer(load_preset("tiny").model, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="decode attention 'flash'"):
        Sampler(model, None, decode_attention="flash")


def test_the_sampler_decodes_the_same_tokens_with_the_kernel_and_counts_live_reads():
    """Greedy decoding of left-padded rows of different lengths: the same tokens with either implementation; the
    live KV reads equal the rows' own slots summed by hand over the chunks (8 + 8 + 4 steps)."""
    from test_sampling_tiny import make_model

    from spade_jax.sampling import Sampler
    from spade_jax.sampling.types import SamplingParams

    model, tok = make_model()
    prompts = [list(range(30, 35)), list(range(40, 57))]  # 5 and 17 tokens
    params = SamplingParams(max_new_tokens=20, greedy=True, ignore_eos=True)
    got = {}
    for impl in ("xla", "pallas"):
        sampler = Sampler(model, tok, max_total_len=256, chunk_steps=8, decode_attention=impl)
        got[impl] = [c.token_ids for c in sampler.generate(prompts, params)]
        live, total = sampler.kv_slot_reads
        assert live == 8 * (5 + 17) + 8 * (5 + 17 + 2 * 8) + 4 * (5 + 17 + 2 * 16)
        assert total == 20 * 2 * sampler.engine.cache.length if sampler.engine.cache is not None else total > live
    assert got["xla"] == got["pallas"] and all(len(t) == 20 for t in got["xla"])


# ----------------------------------------------------------------------------- no float32 copies in the loop
def _decode_loop_hlo(model, batch: int = 4, slots: int = 512, width: int = 16) -> str:
    from spade_jax.sampling import decode
    from spade_jax.sampling.decode import DecodeState, RowConsts

    cfg = model.cfg
    graphdef, state = nnx.split(model)
    cache = KVCache.zeros(cfg, batch, slots)
    dstate = DecodeState(logits=jnp.zeros((batch, cfg.vocab_size)), generated=jnp.zeros((batch,), jnp.int32),
                         column=jnp.int32(64), done=jnp.zeros((batch,), bool), finish=jnp.zeros((batch,), jnp.int32),
                         recent=jnp.full((batch, 4), -1, jnp.int32))  # fmt: skip
    consts = RowConsts(pad_len=jnp.zeros((batch,), jnp.int32), budget=jnp.full((batch,), 99, jnp.int32),
                       budget_code=jnp.zeros((batch,), jnp.int32), greedy=jnp.zeros((batch,), bool),
                       temperature=jnp.full((batch,), 0.6), top_k=jnp.full((batch,), 20, jnp.int32),
                       top_p=jnp.full((batch,), 0.95), keys=jnp.zeros((batch, 2), jnp.uint32),
                       stop_ids=jnp.full((batch, 1), -1, jnp.int32), stop_seqs=jnp.full((batch, 1, 4), -2, jnp.int32),
                       stop_used=jnp.zeros((batch, 1, 4), bool))  # fmt: skip

    def chunk(st, head, c, s, k):  # as the engine runs it: the tied head as its [E, V] copy (Runtime.layouts)
        return decode.decode_chunk(nnx.merge(graphdef, st), c, s, k, width, batch + 1, width=width,
                                   layouts=DecodeLayouts(head=head))  # fmt: skip

    head = model.decode_layouts(head=True).head
    return jax.jit(chunk).lower(state, head, cache, dstate, consts).compile().as_text()


def _f32_copies(text: str, model, kv_elements: int) -> tuple[list, list]:
    """(float32 arrays of at least a KV layer's size made anywhere, float32 weight-shaped arrays a loop carries)."""
    weights = {tuple(x.shape) for x in jax.tree.leaves(nnx.state(model)) if x.ndim == 2}
    kv = hlo.made_arrays(text, "f32", kv_elements)
    carried = [s for state in hlo.while_states(text) for s in state if s[0] == "f32" and s[1] in weights]
    return kv, carried


def test_a_bfloat16_decode_loop_holds_no_float32_weight_or_kv_copy():
    """The paper presets' float32 masters with bfloat16 compute, decoded from the sampler's bfloat16 copy
    (run/parts.py `decode_weights`): the optimised decode loop makes no float32 array of a KV layer's size and
    carries no float32 weight. Both checks can fail: the masters themselves put float32 weights into the loop's
    state, and a float32 upcast of the cache (the former batched attention) is found."""
    from spade_jax.run.parts import decode_weights

    cfg = load_preset("tiny").model.replace(param_dtype="float32", dtype="bfloat16")
    masters = Transformer(cfg, rngs=nnx.Rngs(0))
    kv_elements = 4 * cfg.num_kv_heads * cfg.head_dim * 512
    copy = decode_weights(masters)
    assert {x.dtype for x in jax.tree.leaves(nnx.state(copy))} == {jnp.dtype(jnp.bfloat16)}
    assert _f32_copies(_decode_loop_hlo(copy), copy, kv_elements) == ([], [])
    _, carried = _f32_copies(_decode_loop_hlo(masters), masters, kv_elements)
    assert carried  # the float32 masters themselves are carried (the check sees weights)
    keys = jnp.zeros((4, cfg.num_kv_heads, cfg.head_dim, 512), jnp.bfloat16)
    q = jnp.zeros((4, cfg.num_kv_heads, 2, cfg.head_dim), jnp.bfloat16)
    upcast = jax.jit(lambda q, k: (q[..., None].astype(jnp.float32) * k[:, :, None].astype(jnp.float32)).sum(-2))
    assert hlo.made_arrays(upcast.lower(q, keys).compile().as_text(), "f32", kv_elements)  # (the check sees KV)


def test_the_bfloat16_copy_decodes_like_the_float32_masters():
    """Same values to the rounding of a float32 sum: every matmul of a bfloat16-compute model rounds its float32
    weight to bfloat16 anyway; the copy's sum it in float32 from bfloat16 weights directly."""
    from spade_jax.run.parts import decode_weights

    cfg = load_preset("tiny").model.replace(param_dtype="float32", dtype="bfloat16")
    masters = Transformer(cfg, rngs=nnx.Rngs(0))
    tokens = jnp.asarray([[5, 9, 200, 17, 3]], jnp.int32)
    a, _ = masters(tokens)
    copy = decode_weights(masters)
    assert masters.cfg.scanned and not copy.cfg.scanned  # one module per layer: decoding slices nothing
    b, _ = copy(tokens)
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=0.02)  # bfloat16 activations: ~1% of ~1
    assert nnx.graphdef(decode_weights(masters)) == nnx.graphdef(copy)  # the sampler keeps its programs
    same = load_preset("tiny").model  # float32 compute: the sampler keeps the learner's own arrays
    model = Transformer(same, rngs=nnx.Rngs(0))
    assert decode_weights(model) is model
