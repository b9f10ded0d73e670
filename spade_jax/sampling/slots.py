"""Device-side moves of the decode engine's KV cache [B, .., S]: rows admitted into slots, rows gathered for a
continuation, columns shifted (and the cache grown or shrunk), rows permuted (the batch grown or shrunk).

Pure functions of arrays, compiled by the engine (engine.py) once per shape. Columns that no row attends (left
of a row's `pad_len`, or at and right of the write column) may hold anything: every caller keeps the mask, not
the contents, as the truth of what a row sees.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from spade_jax.model.kv_cache import KVCache


def _cols(x: jax.Array, idx: jax.Array, axis: int) -> jax.Array:
    """x gathered along its column axis by per-row indices idx [n, W] (x: [n, ...])."""
    shape = [idx.shape[0]] + [1] * (x.ndim - 1)
    shape[axis] = idx.shape[1]
    return jnp.take_along_axis(x, idx.reshape(shape), axis=axis)


def insert(
    cache: KVCache, logits: jax.Array, block: KVCache, block_logits: jax.Array, rows: jax.Array, src: jax.Array, col0
) -> tuple[KVCache, jax.Array]:
    """Writes block row i ([n, .., P]) into cache row rows[i] at columns [col0, col0 + P), the row's column
    col0 + j taking block column src[i, j]; its logits into logits[rows[i]]. Rows >= B are padding: dropped."""
    b, n = cache.k[0].shape[0], block.k[0].shape[0]

    def put(dst, blk, axis):
        blk = _cols(blk, src, axis)

        def body(i, d):
            r = jnp.minimum(rows[i], b - 1)
            start = [r] + [0] * (d.ndim - 1)
            start[axis] = col0
            size = list(blk.shape[1:])
            cur = jax.lax.dynamic_slice(d, start, [1, *size])
            new = jnp.where(rows[i] < b, jax.lax.dynamic_slice_in_dim(blk, i, 1, 0), cur)
            return jax.lax.dynamic_update_slice(d, new, start)

        return jax.lax.fori_loop(0, n, body, dst)

    k = [put(c, x, 3) for c, x in zip(cache.k, block.k)]
    v = [put(c, x, 2) for c, x in zip(cache.v, block.v)]
    return KVCache(k=k, v=v).constrained(), logits.at[rows].set(block_logits, mode="drop")


def gather(cache: KVCache, rows: jax.Array, src: jax.Array) -> KVCache:
    """A [n, .., W] cache whose row i, column j is cache row rows[i], column src[i, j] (zero where src < 0); one
    gather of just those columns (never a copy of whole rows)."""
    b, s = cache.k[0].shape[0], cache.length
    ok = src >= 0
    idx = jnp.clip(src, 0, s - 1)
    r = jnp.clip(rows, 0, b - 1)[:, None]
    k = [jnp.where(ok[:, None, None, :], jnp.transpose(x[r, :, :, idx], (0, 2, 3, 1)), 0) for x in cache.k]
    v = [jnp.where(ok[:, None, :, None], jnp.transpose(x[r, :, idx, :], (0, 2, 1, 3)), 0) for x in cache.v]
    return KVCache(k=k, v=v).constrained()


def relayout(cache: KVCache, shift, length: int) -> KVCache:
    """The cache with `length` columns, new column c holding old column c + shift (zero outside the old ones):
    shift > 0 moves every row left, < 0 right."""
    s = cache.length
    idx = jnp.arange(length, dtype=jnp.int32) + shift
    ok = (idx >= 0) & (idx < s)
    idx = jnp.clip(idx, 0, s - 1)
    k = [jnp.where(ok, jnp.take(x, idx, axis=3), 0) for x in cache.k]
    v = [jnp.where(ok[:, None], jnp.take(x, idx, axis=2), 0) for x in cache.v]
    return KVCache(k=k, v=v).constrained()


def permute(cache: KVCache, logits: jax.Array, perm: jax.Array) -> tuple[KVCache, jax.Array]:
    """Rows perm[i] of the cache and logits as the new row i (perm [B'] in [0, B)): the batch resized."""
    k = [jnp.take(x, perm, axis=0) for x in cache.k]
    v = [jnp.take(x, perm, axis=0) for x in cache.v]
    return KVCache(k=k, v=v).constrained(), jnp.take(logits, perm, axis=0)
