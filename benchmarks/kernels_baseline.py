"""The decode code that issue 46 replaced, kept verbatim as the baseline `benchmarks/kernel_proxies.py` measures beside
today's implementation in the same run (never imported by the package or its tests).

- `pick(mode, logits, u, temperature, top_k, top_p, greedy_rows)`: the sampler before candidate blocks: a static
  mode per compiled program, weights materialised over the whole [B, V] row, two 32-step bisections over it, a
  padded copy for the draw (spade_jax/sampling/sampling_fns.py at 3dab310).
- `attend_one(q, parts, head_dim)`: the decode attention before one dot per KV head: for several rows a float32
  broadcast-multiply-reduce per query head (spade_jax/model/kv_cache.py at 3dab310).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

MODES = ("greedy", "sample", "top_k", "top_p", "top_k_top_p")
_BLOCK = 256


def mode_of(greedy: bool, top_k: int, top_p: float) -> str:
    """The static sampling mode a compiled decode program is specialised for (unused filters cost nothing)."""
    if greedy:
        return "greedy"
    filters = [name for name, on in (("top_k", top_k > 0), ("top_p", top_p < 1.0)) if on]
    return "_".join(filters) or "sample"


def raw_logprob(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """log softmax(logits)[token] per row, in float32."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0] - lse


def argmax(logits: jax.Array) -> jax.Array:
    """First index of the row maximum, int32 [B]; ~7x faster than jnp.argmax on CPU (two plain reductions)."""
    v = logits.shape[-1]
    top = jnp.max(logits, axis=-1, keepdims=True)
    first = jnp.min(jnp.where(logits == top, jnp.arange(v, dtype=jnp.int32), v), axis=-1)
    return jnp.minimum(first, v - 1)


def greedy(logits: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """argmax; the sampling distribution is a point mass, so its log-prob is 0."""
    tokens = argmax(logits)
    return tokens, jnp.zeros(tokens.shape, jnp.float32), raw_logprob(logits, tokens)


def _last_positive(w: jax.Array) -> jax.Array:
    """Index of the last entry > 0 along the last axis (0 when none)."""
    n = w.shape[-1]
    return (n - 1 - jnp.argmax(jnp.flip(w > 0, axis=-1), axis=-1)).astype(jnp.int32)


def draw(weights: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index i with probability weights[i] / sum(weights) per row (u: uniform [0, 1) per row); also the sums.

    Two-level inverse CDF: find the block whose cumulative mass crosses u * total, then the token inside it.
    Tokens of zero weight are never returned.
    """
    b, v = weights.shape
    nb = -(-v // _BLOCK)
    w = jnp.pad(weights, ((0, 0), (0, nb * _BLOCK - v))).reshape(b, nb, _BLOCK)
    block_mass = w.sum(-1)  # [B, nb]
    block_cum = jnp.cumsum(block_mass, axis=-1)
    total = block_cum[:, -1]
    target = u * total
    blk = jnp.sum(block_cum <= target[:, None], axis=-1).astype(jnp.int32)
    blk = jnp.minimum(blk, _last_positive(block_mass))
    before = jnp.take_along_axis(block_cum - block_mass, blk[:, None], axis=-1)[:, 0]
    inner = jnp.take_along_axis(w, blk[:, None, None], axis=1)[:, 0]  # [B, BLOCK]
    inner_cum = jnp.cumsum(inner, axis=-1)
    pos = jnp.sum(inner_cum <= (target - before)[:, None], axis=-1).astype(jnp.int32)
    pos = jnp.minimum(pos, _last_positive(inner))
    return blk * _BLOCK + pos, total


def _bits(x: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(x, jnp.int32)


def _threshold(w: jax.Array, ok) -> jax.Array:
    """Largest float32 t >= 0 (as a value) with ok(t) true per row, by bisection on the bit pattern of t.

    ok(t) -> bool [B] must be monotone: true at t = 0, and once false stays false as t grows.
    """
    lo = jnp.zeros(w.shape[:1], jnp.int32)  # ok(lo) holds
    hi = _bits(jnp.max(w, axis=-1)) + 1  # t above the max keeps nothing

    def body(_, lohi):
        lo, hi = lohi
        mid = lo + (hi - lo) // 2
        good = ok(jax.lax.bitcast_convert_type(mid, jnp.float32))
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid)

    lo, _ = jax.lax.fori_loop(0, 32, body, (lo, hi))
    return jax.lax.bitcast_convert_type(lo, jnp.float32)


def keep_mask(weights: jax.Array, top_k: jax.Array | None, top_p: jax.Array | None) -> jax.Array:
    """Tokens kept by top-k then top-p (as HF applies them), given positive weights [B, V] (any scale).

    top-k keeps every token whose weight is >= the k-th largest (k <= 0: all). top-p then keeps the most likely
    tokens of that set whose mass first reaches top_p of the set's mass (ties at the boundary are all kept).
    A filter given as None is skipped at trace time.
    """
    w = weights
    t = jnp.zeros(w.shape[:1], w.dtype)
    if top_k is not None:
        k = jnp.where(top_k > 0, top_k, w.shape[-1])
        t = _threshold(w, lambda t: jnp.sum(w >= t[:, None], axis=-1) >= k)
        w = jnp.where(w >= t[:, None], w, 0.0)
    if top_p is not None:
        need = top_p * jnp.sum(w, axis=-1)
        t_p = _threshold(w, lambda t: jnp.sum(jnp.where(w >= t[:, None], w, 0.0), axis=-1) >= need)
        t = jnp.where(top_p >= 1.0, t, jnp.maximum(t_p, t))
    return (weights >= t[:, None]) & (weights > 0)


def _row(x: jax.Array | float, dtype) -> jax.Array:
    """A per-row setting as a column [B, 1] (a scalar stays a scalar)."""
    x = jnp.asarray(x, dtype)
    return x[:, None] if x.ndim == 1 else x


def _draw_filtered(logits, u, temperature, top_k, top_p) -> tuple[jax.Array, jax.Array]:
    """(tokens, log-prob under the drawn distribution) for softmax(logits / temperature), truncated by top-k /
    top-p when given (scalars or per-row [B])."""
    z = (logits - jnp.max(logits, axis=-1, keepdims=True)) / _row(temperature, jnp.float32)
    weights = jnp.exp(z)
    if top_k is not None or top_p is not None:
        top_k = None if top_k is None else jnp.asarray(top_k, jnp.int32)
        top_p = None if top_p is None else jnp.asarray(top_p, jnp.float32)
        weights = jnp.where(keep_mask(weights, top_k, top_p), weights, 0.0)
    tokens, total = draw(weights, u)
    z_tok = jnp.take_along_axis(z, tokens[:, None], axis=-1)[:, 0]
    return tokens, z_tok - jnp.log(total)


def sample(
    logits: jax.Array,
    u: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array | None = None,
    top_p: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Draws from softmax(logits / temperature), truncated by top-k / top-p when given; u: uniform [B]. The
    settings are scalars or per row ([B])."""
    tokens, lp = _draw_filtered(logits, u, temperature, top_k, top_p)
    return tokens, lp, raw_logprob(logits, tokens)


def pick(mode: str, logits: jax.Array, u: jax.Array | None, temperature, top_k, top_p, greedy_rows=None):
    """Dispatches on the static mode; u: one uniform per row (unused when greedy). The settings are per row
    ([B]) or scalars; `greedy_rows` (bool [B]) marks rows decoded by argmax inside a sampling mode, so rows of
    different settings share one program (a row's result does not depend on the mode it runs under)."""
    if mode == "greedy":
        return greedy(logits)
    if mode not in MODES:
        raise ValueError(f"unknown sampling mode {mode!r}; expected one of {MODES}")
    use_k, use_p = "top_k" in mode, "top_p" in mode
    tokens, lp = _draw_filtered(logits, u, temperature, top_k if use_k else None, top_p if use_p else None)
    if greedy_rows is not None:
        tokens = jnp.where(greedy_rows, argmax(logits), tokens)
        lp = jnp.where(greedy_rows, 0.0, lp)
    return tokens, lp, raw_logprob(logits, tokens)


def mode_of_rows(greedy_rows, top_k_rows, top_p_rows) -> str:
    """The one mode that serves every row (host arrays): greedy when all are, else the union of the filters."""
    greedy_rows = np.asarray(greedy_rows, bool)
    if greedy_rows.all():
        return "greedy"
    top_k = np.asarray(top_k_rows)[~greedy_rows]
    top_p = np.asarray(top_p_rows)[~greedy_rows]
    return mode_of(False, int(top_k.max()), float(top_p.min()))


# ------------------------------------------------------------------ kv_cache.py at 3dab310
NEG_INF = -1e30


def _scores(q: jax.Array, kc: jax.Array, valid: jax.Array, head_dim: int) -> jax.Array:
    """float32 scores [B, K, G, S] of q [B, K, G, D] against keys kc [B, K, D, S]; -inf-like where not valid [B, S].

    For several rows, written as broadcast-multiply-reduce, which XLA:CPU fuses into loops that read each cache
    slot once (as dots, the cache operand costs ~15% more at batch 32); for one row, as dots, which skip the
    reduction library's per-call overhead (~90 us a layer).
    """
    f32 = jnp.float32
    if q.shape[0] == 1:
        scores = jnp.einsum("bkgd,bkds->bkgs", q, kc.astype(q.dtype), preferred_element_type=f32)
    else:
        scores = (q[..., None].astype(f32) * kc[:, :, None].astype(f32)).sum(-2)
    return jnp.where(valid[:, None, None, :], scores * head_dim**-0.5, NEG_INF)


def _weighted(probs: jax.Array, vc: jax.Array) -> jax.Array:
    """float32 [B, K, G, D]: probs [B, K, G, S] (unnormalised) times values vc [B, K, S, D]."""
    probs = probs.astype(vc.dtype)
    if probs.shape[0] == 1:
        return jnp.einsum("bkgs,bksd->bkgd", probs, vc, preferred_element_type=jnp.float32)
    return (probs[..., None] * vc[:, :, None, :, :]).sum(-2).astype(jnp.float32)


def attend_one(q: jax.Array, parts: list[tuple[jax.Array, jax.Array, jax.Array]], head_dim: int) -> jax.Array:
    """q [B, K, G, D] over one softmax spanning every (keys [B, K, D, S], values [B, K, S, D], valid [B, S]) part
    (a read-only cache and the current decode chunk, or the cache alone) -> [B, K, G, D]."""
    scores = [_scores(q, k, valid, head_dim) for k, _, valid in parts]
    top = functools.reduce(jnp.maximum, [s.max(-1, keepdims=True) for s in scores])
    exps = [jnp.exp(s - top) for s in scores]
    total = sum(e.sum(-1, keepdims=True) for e in exps)
    out = sum(_weighted(e, v) for e, (_, v, _) in zip(exps, parts))
    return (out / total).astype(q.dtype)
