"""The model's KV cache and the arithmetic of a one-token decode step (`Transformer.decode` uses these).

One cache layout serves prefill, decoding and the sampler: keys [B, kv_heads, head_dim, S] and values
[B, kv_heads, S, head_dim], the layouts in which both attention contractions of a single query reduce over a
non-minor axis (head_dim for the scores, S for the output) and so vectorise along the contiguous one. XLA then
reads each cache slot once per decode step ([B, S, kv_heads, D] made it transpose the whole cache every step;
keys as [.., S, D] made the float32 score dot ~5x slower on XLA:CPU at batch 16-64).

The decode step's attention (`attend_one`) is one batched dot per KV head over its group of query heads, in
the cache's dtype with float32 accumulation: a bfloat16 cache is read as bfloat16, once per group.

`DecodeLayouts` holds optional CPU-fast copies of the weights for decoding (the tied head as [E, V], the
projections as [out, in], a stacked model's blocks per layer); they change speed, not values.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from spade_jax.model.config import ModelConfig
from spade_jax.model.sharding import constrain

NEG_INF = -1e30
K_AXES = ("batch", "kv_heads", "head_dim", "length")
V_AXES = ("batch", "kv_heads", "length", "head_dim")


@flax.struct.dataclass
class KVCache:
    """Per-layer keys [B, kv_heads, head_dim, S] and values [B, kv_heads, S, head_dim]; slot s holds the token
    written at s."""

    k: list[jax.Array]
    v: list[jax.Array]

    @classmethod
    def zeros(cls, cfg: ModelConfig, batch: int, length: int, dtype=None) -> KVCache:
        """An empty cache for `cfg`, in its compute dtype unless `dtype` is given."""
        kvh, d, dt = cfg.num_kv_heads, cfg.head_dim, dtype or cfg.jnp_dtype
        k = [jnp.zeros((batch, kvh, d, length), dt) for _ in range(cfg.num_layers)]
        v = [jnp.zeros((batch, kvh, length, d), dt) for _ in range(cfg.num_layers)]
        return cls(k=k, v=v)

    @property
    def length(self) -> int:
        return self.v[0].shape[2]

    def constrained(self) -> KVCache:
        """The same cache with its activation sharding applied (a no-op without a mesh)."""
        return KVCache(k=[constrain(x, K_AXES) for x in self.k], v=[constrain(x, V_AXES) for x in self.v])

    def grow(self, length: int) -> KVCache:
        """The same cache with more (empty) slots at the end."""
        n = length - self.length
        k = [jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, n))) for x in self.k]
        v = [jnp.pad(x, ((0, 0), (0, 0), (0, n), (0, 0))) for x in self.v]
        return KVCache(k=k, v=v).constrained()


def write(keys: jax.Array, values: jax.Array, k: jax.Array, v: jax.Array, at) -> tuple[jax.Array, jax.Array]:
    """Cache buffers with new k, v [B, T, kv_heads, D] written at slots [at, at + T)."""
    keys = jax.lax.dynamic_update_slice(keys, k.transpose(0, 2, 3, 1).astype(keys.dtype), (0, 0, 0, at))
    values = jax.lax.dynamic_update_slice(values, v.transpose(0, 2, 1, 3).astype(values.dtype), (0, 0, at, 0))
    return constrain(keys, K_AXES), constrain(values, V_AXES)


@flax.struct.dataclass
class DecodeLayouts:
    """Optional decode-time weight layouts: `head` the tied embedding as [E, V] (what the CPU GEMM library takes
    for batches of 2 or more rows; at batch 1 the embedding's own [V, E] is faster); `kernels` per layer the
    projections as [out, in] with q/k/v and gate/up stacked ("qkv", "o", "gate_up", "down"): XLA's
    matrix-vector code streams weights ~25% faster so (SmolLM2-135M, float32, CPU), and at batch 1 decoding
    is bound by that stream; `layers` a stacked model's blocks as per-layer copies (`nnx.State` each): XLA:CPU
    copies a slice of a stacked weight on every step (decoding took 2x as long), so the sampler slices once per
    weight update instead. None: the model's own weights."""

    head: jax.Array | None = None
    kernels: list[dict[str, jax.Array]] | None = None
    layers: list[Any] | None = None


def _scores(q: jax.Array, kc: jax.Array, valid: jax.Array, head_dim: int) -> jax.Array:
    """float32 scores [B, K, G, S] of q [B, K, G, D] against keys kc [B, K, D, S]; -inf-like where not valid [B, S].

    One batched dot per (row, KV head) over its G query heads, q rounded to the cache dtype and the products
    accumulated in float32: each key is read once for the whole group and never copied to float32.
    """
    scores = jnp.einsum("bkgd,bkds->bkgs", q.astype(kc.dtype), kc, preferred_element_type=jnp.float32)
    return jnp.where(valid[:, None, None, :], scores * head_dim**-0.5, NEG_INF)


def _weighted(probs: jax.Array, vc: jax.Array) -> jax.Array:
    """float32 [B, K, G, D]: probs [B, K, G, S] (unnormalised) times values vc [B, K, S, D], one batched dot per
    (row, KV head) as `_scores`."""
    return jnp.einsum("bkgs,bksd->bkgd", probs.astype(vc.dtype), vc, preferred_element_type=jnp.float32)


def attend_one(q: jax.Array, parts: list[tuple[jax.Array, jax.Array, jax.Array]], head_dim: int) -> jax.Array:
    """q [B, K, G, D] over one softmax spanning every (keys [B, K, D, S], values [B, K, S, D], valid [B, S]) part
    (a read-only cache and the current decode chunk, or the cache alone) -> [B, K, G, D]. The XLA path of
    `decode_attention.attend` (every backend; the reference its kernels are tested against)."""
    scores = [_scores(q, k, valid, head_dim) for k, _, valid in parts]
    top = functools.reduce(jnp.maximum, [s.max(-1, keepdims=True) for s in scores])
    exps = [jnp.exp(s - top) for s in scores]
    total = sum(e.sum(-1, keepdims=True) for e in exps)
    out = sum(_weighted(e, v) for e, (_, v, _) in zip(exps, parts))
    return (out / total).astype(q.dtype)


def take_rows(table: jax.Array, ids: jax.Array) -> jax.Array:
    """table[ids] along the first axis, gathered as raw bits when the table is 16-bit floats (the same values):
    XLA:CPU has no bfloat16 gather and hoisted a float32 copy of the whole embedding out of the decode loop."""
    if table.dtype.itemsize != 2:
        return jnp.take(table, ids, axis=0)
    bits = jax.lax.bitcast_convert_type(table, jnp.uint16)
    return jax.lax.bitcast_convert_type(jnp.take(bits, ids, axis=0), table.dtype)


def linears(lins: tuple, x: jax.Array, kernel_t: jax.Array | None) -> list[jax.Array]:
    """[lin(x) for lin in lins], from their kernels stacked as [sum of outs, in] (`DecodeLayouts.kernels`) when
    given, with the same arithmetic (bfloat16 weights: a bfloat16 matmul accumulating in float32, rounded to x's
    dtype)."""
    if kernel_t is None:
        return [lin(x) for lin in lins]
    dims = (((x.ndim - 1,), (1,)), ((), ()))
    if kernel_t.dtype == jnp.bfloat16:
        y = jax.lax.dot_general(x.astype(kernel_t.dtype), kernel_t, dims, preferred_element_type=jnp.float32)
    else:
        y = jax.lax.dot_general(x, kernel_t.astype(x.dtype), dims)
    ends = list(itertools.accumulate(lin.kernel.shape[1] for lin in lins))
    parts = jnp.split(y, ends[:-1], axis=-1)
    return [(p + lin.bias[...].astype(p.dtype) if lin.use_bias else p).astype(x.dtype) for p, lin in zip(parts, lins)]


def stacked_t(*lins) -> jax.Array:
    """The kernels of `lins` as one [sum of outs, in] matrix (the layout `linears` takes)."""
    return jnp.concatenate([lin.kernel[...].T for lin in lins], axis=0)
