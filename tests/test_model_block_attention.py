"""`block_attention` against plain `attention`: values and gradients at row lengths that are not a multiple of
the query chunk or of the loop's block rows (a 2176-token learner row once fell back to the whole score matrix
and took 21 GB on CPU)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spade_jax.model.transformer as transformer
from spade_jax.model.transformer import attention, block_attention, block_rows


def _inputs(t: int, *, b: int = 2, kv: int = 2, groups: int = 3, d: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, kv, groups, d)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, t, kv, d)), jnp.float32)
    seg = np.ones((b, t), np.int32)
    seg[1, t // 2 :] = 2  # two packed segments in the second row
    seg[0, t - 3 :] = 0  # padding at the end of the first
    seg = jnp.asarray(seg)
    causal = jnp.arange(t)[:, None] >= jnp.arange(t)[None, :]
    mask = (seg[:, :, None] == seg[:, None, :]) & causal[None] & (seg[:, :, None] > 0)
    return q, k, v, mask


def test_block_rows_rule():
    assert block_rows(2048, 128) == 512  # 16 blocks: a loop of 512-row blocks
    assert block_rows(2176, 128) == 128  # 17 blocks: 17 does not split into 2-4 chunks, so 128-row blocks
    assert block_rows(1000, 128) == 128  # padded to 1024: 8 unrolled blocks
    assert block_rows(4000, 128) == 512  # padded to 4096 = 32 chunks: a loop of 512-row blocks
    assert block_rows(100, 128) == 100 and block_rows(100, 0) == 100  # no split


@pytest.mark.parametrize(("t", "chunk", "loop_rows"), [(17, 4, 512), (34, 2, 4), (30, 4, 8), (32, 4, 8)])
def test_block_attention_matches_attention(monkeypatch, t, chunk, loop_rows):
    monkeypatch.setattr(transformer, "LOOP_BLOCK_ROWS", loop_rows)  # small rows take the looped path
    q, k, v, mask = _inputs(t)
    want = attention(q, k, v, mask)
    got = block_attention(q, k, v, mask, chunk)
    assert got.shape == want.shape
    live = np.asarray(mask.any(-1))  # rows that attend to nothing (padding) are don't-cares
    np.testing.assert_allclose(np.asarray(got)[live], np.asarray(want)[live], atol=1e-5)

    def loss(fn):
        return lambda q, k, v: jnp.sum(jnp.where(mask.any(-1)[..., None, None, None], fn(q, k, v), 0.0) ** 2)

    g_want = jax.grad(loss(lambda q, k, v: attention(q, k, v, mask)), argnums=(0, 1, 2))(q, k, v)
    g_got = jax.grad(loss(lambda q, k, v: block_attention(q, k, v, mask, chunk)), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_got, g_want):
        assert np.isfinite(np.asarray(a)).all()
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_bfloat16_attention_runs_on_cpu_and_matches_float32():
    """XLA:CPU fails at run time on some bfloat16 x bfloat16 -> float32 dot layouts (a bfloat16 run of a paper
    preset on CPU died in its first cached prefill): every attention form runs in bfloat16 here, and its scores
    are the float32 ones of the same (bfloat16-rounded) inputs."""
    from spade_jax.model.transformer import attention, block_attention, cached_attention

    rng = np.random.default_rng(0)
    b, t, kh, g, d, s = 2, 24, 2, 2, 16, 24
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((b, t, kh, g, d), (b, s, kh, d), (b, s, kh, d)))
    q, k, v = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))
    mask = jnp.tril(jnp.ones((t, s), bool))[None].repeat(b, 0)
    want = attention(*(x.astype(jnp.float32) for x in (q, k, v)), mask)
    keys, values = jnp.moveaxis(k, 1, -1), jnp.moveaxis(v, 1, 2)  # the cache's layouts: [B, K, D, S], [B, K, S, D]
    for got in (jax.jit(attention)(q, k, v, mask), jax.jit(cached_attention)(q, keys, values, mask),
                jax.jit(block_attention, static_argnums=4)(q, k, v, mask, 8)):  # fmt: skip
        assert got.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), atol=2e-2)
