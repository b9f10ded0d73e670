"""Training attention (`model/train_attention.py`) against plain `attention` on a dense mask of packed rows:
values and gradients of the XLA flash loop at row lengths that are not a multiple of the block, the causal
mask it builds from segment ids, cuDNN's packed-segment table, and the TPU splash kernel run on CPU in Pallas
interpret mode (values and gradients). cuDNN itself cannot run here: the device check runs it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spade_jax.model import train_attention as ta


def _inputs(t: int, *, b: int = 2, kv: int = 2, groups: int = 3, d: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, kv, groups, d)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    seg = np.ones((b, t), np.int32)
    seg[0, t - 3 :] = 0  # padding at the end of the first row
    seg[-1, t // 3 :] = 2  # three packed segments in the last
    seg[-1, 2 * t // 3 :] = 3
    return q, k, v, jnp.asarray(seg)


def _dense_mask(seg: np.ndarray) -> np.ndarray:
    """The packed-row mask written out by hand: same segment, at or before, not padding."""
    seg = np.asarray(seg)
    b, t = seg.shape
    mask = np.zeros((b, t, t), bool)
    for r in range(b):
        for i in range(t):
            for j in range(i + 1):
                mask[r, i, j] = seg[r, i] == seg[r, j] and seg[r, i] > 0
    return mask


def test_segment_mask_is_causal_within_segments():
    _, _, _, seg = _inputs(12)
    np.testing.assert_array_equal(np.asarray(ta.segment_mask(seg)), _dense_mask(seg))


def _values_and_grads(fn, q, k, v, live):
    """fn(q, k, v) on live rows and the gradients of a fixed random projection of it, in one jitted program."""
    w = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

    def loss(q, k, v):
        out = fn(q, k, v)
        return jnp.sum(jnp.where(live[:, :, None, None, None], out, 0.0) * w), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return np.asarray(out), [np.asarray(g) for g in grads]


@pytest.mark.parametrize(("t", "chunk"), [(17, 4), (34, 2), (9, 16)])  # unaligned; 17 blocks; the whole matrix
def test_xla_attention_matches_dense_attention(t, chunk):
    q, k, v, seg = _inputs(t)
    mask = jnp.asarray(_dense_mask(seg))
    live = np.asarray(seg) > 0  # padding rows come out as zeros; the reference gives them a uniform average
    want, g_want = _values_and_grads(lambda q, k, v: ta.attention(q, k, v, mask), q, k, v, live)
    got, g_got = _values_and_grads(lambda q, k, v: ta.causal_attention(q, k, v, seg, impl="xla", chunk=chunk),
                                   q, k, v, live)  # fmt: skip
    assert got.shape == want.shape
    np.testing.assert_allclose(got[live], want[live], atol=1e-5)
    assert not got[~live].any()
    for a, b in zip(g_got, g_want):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_flash_loop_visits_only_the_causal_blocks():
    """16 blocks of 4 rows: the loop runs over the 136 blocks on or below the diagonal, not 256 (the FLOPs of
    the upper triangle are never spent)."""
    q, k, v, seg = _inputs(64)
    jaxpr = jax.make_jaxpr(lambda q, k, v: ta.causal_attention(q, k, v, seg, impl="xla", chunk=4))(q, k, v)
    text = str(jaxpr)
    assert "length=136" in text and "length=256" not in text


def test_bfloat16_inputs_stay_close_to_float32():
    q, k, v, seg = _inputs(40, d=16)
    live = np.asarray(seg) > 0
    run = jax.jit(lambda q, k, v: ta.causal_attention(q, k, v, seg, impl="xla", chunk=8))
    want = run(q, k, v)
    got = run(*[x.astype(jnp.bfloat16) for x in (q, k, v)])
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32)[live], np.asarray(want)[live], atol=5e-2)


def test_packed_segment_table_for_cudnn():
    """cuDNN's packed layout (its documented example: per row, each segment's length and first slot, -1 past the
    last), checked by hand; the kernel itself only runs on a GPU (benchmarks' device check)."""
    seg = jnp.asarray([[1, 1, 1, 2, 2, 0], [1, 2, 3, 4, 5, 6]], jnp.int32)
    lengths, offsets = ta.packed_segments(seg, 6)
    np.testing.assert_array_equal(lengths, [[3, 2, -1, -1, -1, -1], [1, 1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(offsets, [[0, 3, -1, -1, -1, -1, -1], [0, 1, 2, 3, 4, 5, -1]])


def test_resolve_picks_the_backend_kernel():
    assert ta.resolve("auto", "cpu") == "xla"
    assert ta.resolve("auto", "gpu") == "cudnn"
    assert ta.resolve("auto", "tpu") == "splash"
    assert ta.resolve("splash", "cpu") == "splash"
    with pytest.raises(ValueError, match="flash"):
        ta.resolve("flash")


@pytest.mark.slow
def test_splash_kernel_in_interpret_mode_matches_dense_attention():
    """The TPU kernel (Pallas interpret mode on CPU: the kernel's own code, run by the interpreter) with grouped
    queries, packed segments, padding and a row length that is not a multiple of its block: values and gradients."""
    q, k, v, seg = _inputs(200, b=1, kv=2, groups=2, d=128, seed=3)
    seg = jnp.asarray(np.where(np.arange(200) < 90, 1, np.where(np.arange(200) < 190, 2, 0))[None], jnp.int32)
    mask = jnp.asarray(_dense_mask(seg))
    live = np.asarray(seg) > 0
    got, g_got = _values_and_grads(lambda q, k, v: ta.splash_attention(q, k, v, seg, interpret=True), q, k, v, live)
    want, g_want = _values_and_grads(lambda q, k, v: ta.attention(q, k, v, mask), q, k, v, live)
    np.testing.assert_allclose(got[live], want[live], atol=2e-5)
    for a, b in zip(g_got, g_want):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_bfloat16_attention_runs_on_cpu_and_matches_float32():
    """XLA:CPU fails at run time on some bfloat16 x bfloat16 -> float32 dot layouts (a bfloat16 run of a paper
    preset on CPU died in its first cached prefill): every attention form runs in bfloat16 here, and its scores
    are the float32 ones of the same (bfloat16-rounded) inputs; the flash loop's backward pass runs too."""
    from spade_jax.model.transformer import attention, cached_attention

    rng = np.random.default_rng(0)
    b, t, kh, g, d, s = 2, 24, 2, 2, 16, 24
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((b, t, kh, g, d), (b, s, kh, d), (b, s, kh, d)))
    q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))
    mask = jnp.tril(jnp.ones((t, s), bool))[None].repeat(b, 0)
    want = attention(*(x.astype(jnp.float32) for x in (q, k, v)), mask)
    keys, values = jnp.moveaxis(k, 1, -1), jnp.moveaxis(v, 1, 2)  # the cache's layouts: [B, K, D, S], [B, K, S, D]
    flash = lambda q, k, v: ta.causal_attention(q, k, v, None, impl="xla", chunk=8)  # 3 blocks of 8 rows
    for got in (jax.jit(attention)(q, k, v, mask), jax.jit(cached_attention)(q, keys, values, mask),
                jax.jit(flash)(q, k, v)):  # fmt: skip
        assert got.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), atol=2e-2)
    grads = jax.jit(jax.grad(lambda q, k, v: flash(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2)))(q, k, v)
    assert all(gr.dtype == jnp.bfloat16 and np.isfinite(np.asarray(gr, np.float32)).all() for gr in grads)
