"""Drawing one token per row from float32 logits [B, V] on device: greedy, temperature, top-k, top-p.

`pick` returns (token int32 [B], logprob [B], raw_logprob [B]): the log-probability of the token under the
distribution it was drawn from, and under the raw model (temperature 1, no truncation). Every setting is a
traced per-row value (greedy, temperature, top-k with 0 = off, top-p with 1 = off), so rows of any settings
share one compiled program and a row's result does not depend on the settings of the rows beside it.

What is kept. With weights w = exp((logits - max) / T): top-k keeps every token whose logit is at least the
k-th largest (ties with it kept); top-p then keeps the most likely tokens of that set whose weight first
reaches top_p of the set's weight (ties with the boundary token kept), as HF's warpers do; a token of weight 0
is never kept. A row's kept set is one logit threshold v: keep = (logit >= v) & (w > 0). Thresholds are found
by bisection on the ordered bit patterns of float32 logits (32 halvings resolve any float32 range), so they are
exact logit values, not approximations; every keep decision compares logits, never recomputed weights.

How it stays fast over a 152K vocabulary. The vocabulary is cut into blocks of BLOCK tokens; one pass takes
each block's maximum. The CANDIDATE_BLOCKS blocks with the largest maxima hold every token at or above any
threshold that lies above the largest excluded block maximum, so the bisections run on those few thousand
candidates instead of the whole row. A row's candidate threshold is provably the full one when it lies above
every excluded logit (or every excluded weight underflows to 0); top-p rows without top-k also need the
candidates to reach their share of the whole row's weight, which is bounded from the candidates and the
largest excluded logit (an exp pass over the row runs only when the bounds leave the threshold open). When
any filtered row cannot be proved exact, the batch takes the full path (`lax.cond`: the same bisections over
every token). Both paths give the same kept sets, tokens and log-probs; `pick(..., explain=True)` says which
one ran (tests assert both run).

The draw is an inverse-CDF lookup with one uniform per row in two levels (block masses, then a cumulative sum
inside the chosen block): no sort and no [B, V] random draw per step. Greedy rows take the first index of the
maximum from the block maxima. Left over [B, V] are one max pass and the raw log-sum-exp, plus one exp pass
when some row has no filter at all, or top-p without top-k over a flat enough distribution.

Failure: none by value (bad settings are refused by `SamplingParams` before they reach here); a row whose
logits are all -inf has no token to draw and returns index 0 with log-prob NaN or -inf.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp

BLOCK = 128  # tokens per vocabulary block: divides 151,936 (Qwen), 49,152 (SmolLM2) and 128,256 (Llama-3)
CANDIDATE_BLOCKS = 32  # blocks searched before the full path: 4,096 candidate tokens
UNDERFLOW_Z = -110.0  # exp(z) is exactly 0 in float32 below this (even without flushing denormals: -103.3)
MASS_SLACK = 1e-5  # relative rounding allowed between two float32 sums of the same weights in different orders


class Path(enum.IntEnum):
    """Which computation a batch's draw took (`pick(..., explain=True)`)."""

    GREEDY = 0  # every row greedy: nothing drawn
    UNFILTERED = 1  # some rows sampled, none with top-k or top-p
    CANDIDATES = 2  # filtered rows resolved on the candidate blocks
    FULL = 3  # filtered rows resolved over the whole vocabulary


class Explained(NamedTuple):
    """`pick`'s results with how they were reached: `threshold` float32 [B] is each row's logit threshold (-inf
    for rows with no filter; meaningless for greedy rows) and `path` the int32 `Path` the batch took."""

    tokens: jax.Array
    logprob: jax.Array
    raw_logprob: jax.Array
    threshold: jax.Array
    path: jax.Array


def raw_logprob(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """log softmax(logits)[token] per row, in float32."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0] - lse


def _blocks(x: jax.Array, fill: float) -> jax.Array:
    """x [B, V] as [B, ceil(V / BLOCK), BLOCK] (the tail padded with `fill`; a reshape when BLOCK divides V)."""
    b, v = x.shape
    nb = -(-v // BLOCK)
    if nb * BLOCK != v:
        x = jnp.pad(x, ((0, 0), (0, nb * BLOCK - v)), constant_values=fill)
    return x.reshape(b, nb, BLOCK)


def _first_max(lb: jax.Array, bmax: jax.Array, m: jax.Array) -> jax.Array:
    """First index of the row maximum m [B], from blocks lb [B, nb, BLOCK] and their maxima bmax [B, nb]: the
    first block holding m, then the first place inside it (two small passes instead of one over [B, V])."""
    blk = jnp.argmax(bmax == m[:, None], axis=-1).astype(jnp.int32)
    inner = jnp.take_along_axis(lb, blk[:, None, None], axis=1)[:, 0]
    return blk * BLOCK + jnp.argmax(inner == m[:, None], axis=-1).astype(jnp.int32)


def argmax(logits: jax.Array) -> jax.Array:
    """First index of the row maximum, int32 [B]."""
    lb = _blocks(logits, -jnp.inf)
    bmax = lb.max(-1)
    return _first_max(lb, bmax, bmax.max(-1))


def greedy(logits: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """argmax; the sampling distribution is a point mass, so its log-prob is 0."""
    tokens = argmax(logits)
    return tokens, jnp.zeros(tokens.shape, jnp.float32), raw_logprob(logits, tokens)


def _last_positive(w: jax.Array) -> jax.Array:
    """Index of the last entry > 0 along the last axis (0 when none)."""
    n = w.shape[-1]
    return (n - 1 - jnp.argmax(jnp.flip(w > 0, axis=-1), axis=-1)).astype(jnp.int32)


def _inverse_cdf(masses: jax.Array, inner_of, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(index, total mass) per row: the block whose cumulative mass crosses u * total (masses [B, nb]), then the
    token inside it (`inner_of(block [B]) -> its kept weights [B, BLOCK]`). Weight-0 tokens are never returned."""
    cum = jnp.cumsum(masses, axis=-1)
    total = cum[:, -1]
    target = u * total
    blk = jnp.sum(cum <= target[:, None], axis=-1).astype(jnp.int32)
    blk = jnp.minimum(blk, _last_positive(masses))
    before = jnp.take_along_axis(cum - masses, blk[:, None], axis=-1)[:, 0]
    inner = inner_of(blk)
    inner_cum = jnp.cumsum(inner, axis=-1)
    pos = jnp.sum(inner_cum <= (target - before)[:, None], axis=-1).astype(jnp.int32)
    pos = jnp.minimum(pos, _last_positive(inner))
    return blk * BLOCK + pos, total


def _block_of(x: jax.Array, blk: jax.Array) -> jax.Array:
    """x [B, nb, BLOCK] at block blk [B] -> [B, BLOCK]."""
    return jnp.take_along_axis(x, blk[:, None, None], axis=1)[:, 0]


def draw(weights: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index i with probability weights[i] / sum(weights) per row (weights >= 0 [B, V], u: uniform [0, 1) per
    row); also the sums. Tokens of zero weight are never returned."""
    w = _blocks(weights, 0.0)
    return _inverse_cdf(w.sum(-1), lambda blk: _block_of(w, blk), u)


def _key(x: jax.Array) -> jax.Array:
    """float32 -> int32 keys in the same order (negative floats' magnitude bits flipped)."""
    i = jax.lax.bitcast_convert_type(x, jnp.int32)
    return jnp.where(i < 0, i ^ jnp.int32(0x7FFFFFFF), i)


def _unkey(k: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(jnp.where(k < 0, k ^ jnp.int32(0x7FFFFFFF), k), jnp.float32)


def _bisect(x: jax.Array, ok) -> jax.Array:
    """Largest float32 value c with ok(c) per row, for ok(c [B]) -> bool [B] monotone in c (true at min(x),
    false above max(x)); x [B, n]. The answer is always one of the row's values (ok changes only there)."""
    lo = _key(jnp.min(x, axis=-1))  # ok(lo) holds
    hi = _key(jnp.max(x, axis=-1)) + 1  # above the max: false

    def body(_, lohi):
        lo, hi = lohi
        # hi - lo may exceed 2**31 (-1e30 .. 30): the wrapped int32 difference read as uint32, halved
        half = (jax.lax.bitcast_convert_type(hi - lo, jnp.uint32) >> 1).astype(jnp.int32)
        mid = lo + half
        good = ok(_unkey(mid))
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid)

    lo, _ = jax.lax.fori_loop(0, 32, body, (lo, hi))
    return _unkey(lo)


def thresholds(x, w, top_k, top_p, full_mass=None) -> tuple[jax.Array, jax.Array]:
    """(top-k threshold, final threshold), float32 [B] each, of logits x [B, n] with weights w [B, n] (see the
    module doc; -inf where a filter is off). `full_mass` [B] replaces the top-k set's mass for rows without
    top-k (x then holds only candidates of the row). Each bisection runs only when some row uses it."""
    b, n = x.shape
    neg_inf = jnp.full((b,), -jnp.inf, jnp.float32)
    on_k, on_p = top_k > 0, top_p < 1.0
    k = jnp.where(on_k, jnp.minimum(top_k, n), n)
    count_ok = lambda c: jnp.sum(x >= c[:, None], axis=-1) >= k
    v_k = jax.lax.cond(jnp.any(on_k), lambda: jnp.where(on_k, _bisect(x, count_ok), -jnp.inf), lambda: neg_inf)

    def top_p_threshold():
        wk = jnp.where(x >= v_k[:, None], w, 0.0)
        mass = jnp.sum(wk, axis=-1)
        if full_mass is not None:
            mass = jnp.where(on_k, mass, full_mass)
        need = top_p * mass
        v_p = _bisect(x, lambda c: jnp.sum(jnp.where(x >= c[:, None], wk, 0.0), axis=-1) >= need)
        return jnp.where(on_p, jnp.maximum(v_p, v_k), v_k)

    return v_k, jax.lax.cond(jnp.any(on_p), top_p_threshold, lambda: v_k)


def _row(x, dtype, b: int) -> jax.Array:
    return jnp.broadcast_to(jnp.asarray(x, dtype), (b,))


def pick(
    logits: jax.Array,
    u: jax.Array,
    temperature,
    top_k,
    top_p,
    greedy_rows=False,
    *,
    candidates: int = CANDIDATE_BLOCKS,
    explain: bool = False,
):
    """Draws a token per row (see the module doc): (tokens, logprob, raw_logprob), or `Explained` with
    `explain`. u: one uniform in [0, 1) per row (unused by greedy rows); temperature, top_k (0: off), top_p
    (1: off) and greedy_rows are per row [B] or scalars. `candidates`: blocks tried before the full path
    (0: always the full path, the reference the candidate path is tested against)."""
    b, _ = logits.shape
    temperature, greedy_rows = _row(temperature, jnp.float32, b), _row(greedy_rows, bool, b)
    top_k, top_p = _row(top_k, jnp.int32, b), _row(top_p, jnp.float32, b)
    lb = _blocks(logits, -jnp.inf)
    nb = lb.shape[1]
    bmax = lb.max(-1)  # [B, nb]: the one pass over V without exp
    m = bmax.max(-1)  # [B]

    def weight(y: jax.Array) -> jax.Array:
        shape = (b,) + (1,) * (y.ndim - 1)
        return jnp.exp((y - m.reshape(shape)) / temperature.reshape(shape))

    filtered = ~greedy_rows & ((top_k > 0) | (top_p < 1.0))
    unfiltered = ~greedy_rows & ~filtered
    neg_inf = jnp.full((b,), -jnp.inf, jnp.float32)

    # Each branch gives the kept mass of every block [B, nb] and each row's threshold (-inf: the whole row); the
    # draw after them reads the chosen block's kept weights again from its logits (one block, any path).
    def unfiltered_masses() -> jax.Array:  # whole-row block masses, computed only when a row needs them
        return jax.lax.cond(jnp.any(unfiltered), lambda: weight(lb).sum(-1), lambda: jnp.zeros((b, nb), jnp.float32))

    def no_filter() -> tuple[jax.Array, ...]:
        return weight(lb).sum(-1), neg_inf, jnp.int32(Path.UNFILTERED)

    def full() -> tuple[jax.Array, ...]:
        w = weight(lb)
        _, t = thresholds(lb.reshape(b, -1), w.reshape(b, -1), top_k, top_p)
        t = jnp.where(filtered, t, -jnp.inf)
        return jnp.where((lb >= t[:, None, None]) & (w > 0), w, 0.0).sum(-1), t, jnp.int32(Path.FULL)

    def with_candidates() -> tuple[jax.Array, ...]:
        top_vals, top_idx = jax.lax.top_k(bmax, candidates + 1)
        idx = jnp.sort(top_idx[:, :candidates], axis=-1)  # vocabulary order
        cand = jnp.take_along_axis(lb, idx[:, :, None], axis=1)  # [B, C, BLOCK] logits
        wc = weight(cand)
        flat_c, flat_w = cand.reshape(b, -1), wc.reshape(b, -1)
        p_only = filtered & (top_k <= 0)
        excluded = top_vals[:, candidates]  # the largest logit outside the candidates
        # Top-p rows without top-k need the whole row's weight. It lies between the candidates' weight and that
        # plus every other token at the excluded maximum's weight (widened by MASS_SLACK for the rounding of a
        # whole-row sum); when the threshold found with the upper bound has less than top_p of the lower bound
        # above it, any mass in between gives the same threshold, and the whole-row exp pass is skipped.
        cand_mass = flat_w.sum(-1)
        rest = (lb.shape[1] * lb.shape[2] - flat_c.shape[1]) * weight(excluded)
        lo, hi = cand_mass * (1 - MASS_SLACK), (cand_mass + rest) * (1 + MASS_SLACK)
        v_k, t = thresholds(flat_c, flat_w, top_k, top_p, hi)
        above = jnp.sum(jnp.where(flat_c > t[:, None], flat_w, 0.0), axis=-1)
        bounded = jnp.all(~p_only | (above < top_p * lo))

        def whole_row_mass() -> tuple[jax.Array, ...]:
            full_mass = weight(lb).sum((1, 2))
            return (full_mass, *thresholds(flat_c, flat_w, top_k, top_p, full_mass))

        full_mass, v_k, t = jax.lax.cond(bounded | ~jnp.any(p_only), lambda: (hi, v_k, t), whole_row_mass)
        # exact: every excluded logit is below the threshold, or every excluded weight is exactly 0
        gone = (excluded - m) / temperature < UNDERFLOW_Z
        beyond = lambda v: (v > excluded) | gone
        ok_k = (top_k <= 0) | ((top_k <= flat_c.shape[1]) & beyond(v_k))
        reached = jnp.sum(jnp.where(flat_c >= t[:, None], flat_w, 0.0), axis=-1) >= top_p * full_mass
        ok_p = ~p_only | (beyond(t) & reached)
        exact = jnp.all(~filtered | (ok_k & ok_p))

        def resolved() -> tuple[jax.Array, ...]:  # no block outside the candidates holds a kept token
            kept = jnp.where((cand >= t[:, None, None]) & (wc > 0), wc, 0.0).sum(-1)
            masses = jnp.zeros((b, nb), jnp.float32).at[jnp.arange(b)[:, None], idx].set(kept)
            masses = jnp.where(unfiltered[:, None], unfiltered_masses(), masses)
            return masses, jnp.where(filtered, t, -jnp.inf), jnp.int32(Path.CANDIDATES)

        return jax.lax.cond(exact, resolved, full)

    def sampled() -> tuple[jax.Array, ...]:
        filtering = with_candidates if 0 < candidates and candidates + 1 < nb else full
        return jax.lax.cond(jnp.any(filtered), filtering, no_filter)

    def none_sampled() -> tuple[jax.Array, ...]:
        return jnp.zeros((b, nb), jnp.float32), neg_inf, jnp.int32(Path.GREEDY)

    masses, threshold, path = jax.lax.cond(jnp.any(~greedy_rows), sampled, none_sampled)

    def kept_block(blk: jax.Array) -> jax.Array:
        y = _block_of(lb, blk)
        w = weight(y)
        return jnp.where((y >= threshold[:, None]) & (w > 0), w, 0.0)

    tokens, total = _inverse_cdf(masses, kept_block, u)
    z_tok = (jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0] - m) / temperature
    lp = z_tok - jnp.log(total)
    tokens = jnp.where(greedy_rows, _first_max(lb, bmax, m), tokens)
    lp = jnp.where(greedy_rows, 0.0, lp)
    out = Explained(tokens, lp, raw_logprob(logits, tokens), threshold, path)
    return out if explain else out[:3]


def sample(
    logits: jax.Array,
    u: jax.Array,
    temperature,
    top_k=None,
    top_p=None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Draws from softmax(logits / temperature), truncated by top-k / top-p when given; u: uniform [B]. The
    settings are scalars or per row ([B])."""
    return pick(logits, u, temperature, 0 if top_k is None else top_k, 1.0 if top_p is None else top_p)


def keep_mask(logits: jax.Array, temperature, top_k, top_p) -> jax.Array:
    """bool [B, V]: the tokens top-k then top-p keep (module doc), by the full computation over every token."""
    b = logits.shape[0]
    t = _row(temperature, jnp.float32, b)[:, None]
    w = jnp.exp((logits - logits.max(-1, keepdims=True)) / t)
    _, v = thresholds(logits, w, _row(top_k, jnp.int32, b), _row(top_p, jnp.float32, b))
    return (logits >= v[:, None]) & (w > 0)
