"""Per-token log-probs and the two learner losses: clipped policy gradient (RL) and masked cross-entropy (SFT).

All per-token arrays follow `rl.batch`'s alignment: value [n, t] belongs to token t. Losses are token-level
means over the mask: sum(loss * mask) / normalizer, where normalizer defaults to sum(mask). Passing the
token count of the whole batch as normalizer makes micro-batch losses (and metrics) add up exactly to the
full-batch ones. With `token_weights` (the reference's per-sample mean over a fixed batch: each token weighs
1 / (its sample's tokens x the global batch)) the loss is sum(loss * mask * weight) instead, which adds up
across micro-batches the same way.

Log-probs come in chunks of positions (`token_logprobs`), and within them, for large vocabularies, in chunks of
the vocabulary (`vocab_logprobs`, a custom VJP: an online log-sum-exp forward, a backward that recomputes one
[positions, vocab chunk] block at a time), so a [rows, T, V] float32 array never exists.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def token_logprobs(
    logits_fn: Callable[[Array], Array],
    hidden: Array,
    tokens: Array,
    *,
    chunk_size: int = 0,
    with_entropy: bool = True,
    tempered_at: float = 0.0,
    head: tuple[Array, int] | None = None,
    vocab_chunk: int = 0,
) -> tuple[Array, ...]:
    """log p(tokens[:, t] | hidden[:, t-1]) for every t (0 at t=0), and the entropy of that distribution;
    with `tempered_at` T > 0 also log softmax(logits / T) at the token (no gradient: the sampler's log-prob at
    temperature T without top-k/top-p, what the reference's TIS divides by), as a third array.

    logits_fn maps hidden states [B, c, E] to float32 logits [B, c, V]. With chunk_size > 0 the sequence is
    processed in chunks of that many positions under `jax.checkpoint`, so at most one chunk of [B, c, V]
    logits is alive in the forward and backward passes (the full [B, T, V] never exists). With `vocab_chunk`
    > 0 and `head` = (the output projection, its vocabulary axis) the logits of a chunk are never whole either:
    `vocab_logprobs` walks the vocabulary `vocab_chunk` entries at a time (same values up to float rounding).
    """
    b, t = tokens.shape
    h, tgt = hidden[:, :-1], tokens[:, 1:]
    by_vocab = head is not None and 0 < vocab_chunk < head[0].shape[head[1]]

    def one(h_c: Array, tgt_c: Array) -> tuple[Array, Array, Array]:
        if by_vocab:
            lp, ent = vocab_logprobs(h_c, tgt_c, head[0], vocab_axis=head[1], chunk=vocab_chunk,
                                     with_entropy=with_entropy)  # fmt: skip
            lpt = jnp.zeros_like(lp)
            if tempered_at > 0:
                lpt = vocab_tempered_logprobs(h_c, tgt_c, head[0], vocab_axis=head[1], chunk=vocab_chunk,
                                              temperature=tempered_at)  # fmt: skip
            return lp, ent if with_entropy else jnp.zeros_like(lp), lpt
        logits = logits_fn(h_c).astype(jnp.float32)
        lse = jax.nn.logsumexp(logits, axis=-1)
        at = jnp.take_along_axis(logits, tgt_c[..., None], axis=-1)[..., 0]
        lp = at - lse
        if tempered_at > 0:
            cold = jax.lax.stop_gradient(logits) / tempered_at
            lpt = jax.lax.stop_gradient(at) / tempered_at - jax.nn.logsumexp(cold, axis=-1)
        else:
            lpt = jnp.zeros_like(lp)
        if not with_entropy:
            return lp, jnp.zeros_like(lp), lpt
        ent = lse - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1)
        return lp, ent, lpt

    n = t - 1
    if chunk_size <= 0 or chunk_size >= n:
        lp, ent, lpt = one(h, tgt)
    else:
        chunks = -(-n // chunk_size)
        pad = chunks * chunk_size - n
        h = jnp.pad(h, ((0, 0), (0, pad), (0, 0)))
        tgt = jnp.pad(tgt, ((0, 0), (0, pad)))
        hc = h.reshape(b, chunks, chunk_size, h.shape[-1]).swapaxes(0, 1)
        tc = tgt.reshape(b, chunks, chunk_size).swapaxes(0, 1)
        # the vocabulary walk keeps only per-position residuals: no recompute of the chunk is needed
        body = (lambda xs: one(*xs)) if by_vocab else jax.checkpoint(lambda xs: one(*xs))
        lp, ent, lpt = jax.lax.map(body, (hc, tc))
        lp, ent, lpt = (x.swapaxes(0, 1).reshape(b, -1)[:, :n] for x in (lp, ent, lpt))
    zero = jnp.zeros((b, 1), jnp.float32)
    lp = jnp.concatenate([zero, lp], axis=1)
    ent = jnp.concatenate([zero, ent], axis=1) if with_entropy else None
    if tempered_at > 0:
        return lp, ent, jnp.concatenate([zero, lpt], axis=1)
    return lp, ent


def vocab_logprobs(
    hidden: Array, targets: Array, weight: Array, *, vocab_axis: int, chunk: int, with_entropy: bool = True
) -> tuple[Array, Array | None]:
    """(log p(targets), entropy) of logits = hidden @ the output projection, `chunk` vocabulary entries at a time.

    hidden [..., E], targets int [...]; weight [V, E] (vocab_axis 0: a tied embedding) or [E, V] (vocab_axis 1: an
    untied head's kernel). Logits are float32, computed as `Transformer.logits` does (bfloat16 weights: a bfloat16
    matmul accumulating in float32). Memory: one [N, chunk] float32 block at a time, forward and backward."""
    lead = targets.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    lp, ent = _vocab_logprobs(h, targets.reshape(-1), weight, vocab_axis, chunk, with_entropy)
    return lp.reshape(lead), ent.reshape(lead) if with_entropy else None


def vocab_tempered_logprobs(
    hidden: Array, targets: Array, weight: Array, *, vocab_axis: int, chunk: int, temperature: float
) -> Array:
    """log softmax(logits / `temperature`) at `targets`, the logits of `vocab_logprobs` (the same float32 values,
    then divided), `chunk` vocabulary entries at a time; no gradient (what `token_logprobs(tempered_at=T)` gives
    on the vocabulary walk: the sampler's log-prob at its temperature, for the importance weight)."""
    lead = targets.shape
    h, tg, w = (jax.lax.stop_gradient(x) for x in (hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1), weight))
    v = w.shape[vocab_axis]

    def step(carry, xs):
        m, s = carry  # running max and sum of exp(l / T - m)
        cold = _chunk_logits(h, w, vocab_axis, xs[0], xs[1], chunk) / temperature
        m_new = jnp.maximum(m, cold.max(-1))
        return (m_new, s * jnp.exp(m - m_new) + jnp.exp(cold - m_new[:, None]).sum(-1)), None

    n = h.shape[0]
    init = (jnp.full((n,), -jnp.inf), jnp.zeros((n,), jnp.float32))
    starts, los = _chunk_starts(v, chunk), np.arange(0, v, chunk).astype(np.int32)
    (m, s), _ = jax.lax.scan(step, init, (starts, los))
    lpt = _target_logits(h, tg, w, vocab_axis) / temperature - (m + jnp.log(s))
    return lpt.reshape(lead)


def _chunk_starts(v: int, chunk: int) -> np.ndarray:
    """First vocabulary index of every chunk; the last chunk is moved back to end at V (it overlaps the one before:
    the overlap is masked), so no chunk reads past the table and the table is never padded (copied)."""
    return np.minimum(np.arange(0, v, chunk), v - chunk).astype(np.int32)


def _chunk_logits(h: Array, weight: Array, vocab_axis: int, start: Array, lo: Array, chunk: int) -> Array:
    """float32 logits [N, chunk] of vocabulary entries [start, start + chunk); -inf below `lo` (counted already)."""
    w = jax.lax.dynamic_slice_in_dim(weight, start, chunk, axis=vocab_axis)
    x = h.astype(w.dtype) if w.dtype == jnp.bfloat16 else h
    spec = "ne,ve->nv" if vocab_axis == 0 else "ne,ev->nv"
    logits = jnp.einsum(spec, x, w.astype(x.dtype), preferred_element_type=jnp.float32)
    return jnp.where(start + jnp.arange(chunk) >= lo, logits, -jnp.inf)


def _target_logits(h: Array, targets: Array, weight: Array, vocab_axis: int) -> Array:
    rows = jnp.take(weight, targets, axis=vocab_axis)
    rows = rows if vocab_axis == 0 else rows.T  # [N, E]
    x = h.astype(rows.dtype) if rows.dtype == jnp.bfloat16 else h
    return jnp.einsum("ne,ne->n", x, rows.astype(x.dtype), preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _vocab_logprobs(h, targets, weight, vocab_axis, chunk, with_entropy):
    return _vocab_fwd(h, targets, weight, vocab_axis, chunk, with_entropy)[0]


def _vocab_fwd(h, targets, weight, vocab_axis, chunk, with_entropy):
    v = weight.shape[vocab_axis]
    starts = _chunk_starts(v, chunk)
    los = np.arange(0, v, chunk).astype(np.int32)  # where each chunk's new entries begin
    n = h.shape[0]

    def step(carry, xs):
        m, s, s1 = carry  # running max, sum of exp(l - m), sum of exp(l - m) * l
        logits = _chunk_logits(h, weight, vocab_axis, xs[0], xs[1], chunk)
        m_new = jnp.maximum(m, logits.max(-1))
        p = jnp.exp(logits - m_new[:, None])
        scale = jnp.exp(m - m_new)
        s1 = s1 * scale + jnp.sum(jnp.where(p > 0, p * logits, 0.0), -1) if with_entropy else s1
        return (m_new, s * scale + p.sum(-1), s1), None

    zeros = jnp.zeros((n,), jnp.float32)
    (m, s, s1), _ = jax.lax.scan(step, (jnp.full((n,), -jnp.inf), zeros, zeros), (starts, los))
    lse = m + jnp.log(s)
    lp = _target_logits(h, targets, weight, vocab_axis) - lse
    ent = lse - s1 / s if with_entropy else zeros
    return (lp, ent), (h, targets, weight, lse, ent)


def _vocab_bwd(vocab_axis, chunk, with_entropy, res, cot):
    """d/dlogit_v of lp = onehot_v - p_v, of the entropy H = lse - E_p[l]: p_v (E_p[l] - l_v); so the logits'
    cotangent is g = dlp (onehot - p) + dH p (E_p[l] - l), one chunk at a time: dh += g @ W_c, dW_c = g^T h."""
    h, targets, weight, lse, ent = res
    dlp, dent = cot
    v = weight.shape[vocab_axis]
    starts, los = _chunk_starts(v, chunk), np.arange(0, v, chunk).astype(np.int32)
    mean_logit = lse - ent  # E_p[l]
    wdt = jnp.float32

    def step(carry, xs):
        dh, dw = carry
        start, lo = xs
        logits = _chunk_logits(h, weight, vocab_axis, start, lo, chunk)
        p = jnp.exp(logits - lse[:, None])
        onehot = (start + jnp.arange(chunk))[None, :] == targets[:, None]
        g = dlp[:, None] * (jnp.where(onehot & (start + jnp.arange(chunk) >= lo), 1.0, 0.0) - p)
        if with_entropy:
            g = g + dent[:, None] * jnp.where(p > 0, p * (mean_logit[:, None] - logits), 0.0)
        w = jax.lax.dynamic_slice_in_dim(weight, start, chunk, axis=vocab_axis)
        gx = g.astype(w.dtype) if w.dtype == jnp.bfloat16 else g
        spec_h, spec_w = ("nv,ve->ne", "nv,ne->ve") if vocab_axis == 0 else ("nv,ev->ne", "nv,ne->ev")
        dh = dh + jnp.einsum(spec_h, gx, w.astype(gx.dtype), preferred_element_type=jnp.float32)
        dw_c = jnp.einsum(spec_w, gx, h.astype(gx.dtype), preferred_element_type=jnp.float32)
        dw = jax.lax.dynamic_update_slice_in_dim(
            dw, jax.lax.dynamic_slice_in_dim(dw, start, chunk, axis=vocab_axis) + dw_c, start, axis=vocab_axis
        )
        return (dh, dw), None

    init = (jnp.zeros(h.shape, jnp.float32), jnp.zeros(weight.shape, wdt))
    (dh, dw), _ = jax.lax.scan(step, init, (starts, los))
    return dh.astype(h.dtype), None, dw.astype(weight.dtype)


_vocab_logprobs.defvjp(_vocab_fwd, _vocab_bwd)


def _masked_sum(x: Array, mask: Array) -> Array:
    return jnp.sum(jnp.where(mask > 0, x, 0.0))


def policy_loss(
    logprobs: Array,
    old_logprobs: Array,
    sampler_logprobs: Array,
    advantages: Array,
    mask: Array,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    is_cap: float = 2.0,
    ref_logprobs: Array | None = None,
    kl_coef: float = 0.0,
    entropy: Array | None = None,
    entropy_coef: float = 0.0,
    normalizer: Array | float | None = None,
    token_weights: Array | None = None,
    kl_clip: float = 0.0,
    tempered_logprobs: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """PPO-clipped policy gradient with truncated importance sampling; token mean over `mask` (or, with
    `token_weights`, the weighted sum over `mask`).

    Per token: ratio = exp(logp - old_logp); pg = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A);
    the importance weight w = min(exp(old_logp - sampler_logp), is_cap) (no gradient) corrects for the sampler
    not being the learner (different numerics, or a stale policy version; NaN sampler log-probs mean unknown and
    give weight 1); loss = w * pg + kl_coef * k3
    - entropy_coef * entropy, with k3 = exp(ref - logp) - (ref - logp) - 1, capped at `kl_clip` when > 0 (the
    reference's low_var_kl clamp). `tempered_logprobs` (the learner's log softmax(logits / T) at the token,
    `token_logprobs(tempered_at=T)`) turns w into the reference's exp(old - sampler's log-prob at its sampling
    temperature): exp(old - tempered) for a fresh sample, times exp(old - sampler_logp), the drift since
    sampling, for a stale one. Metrics (the loss's value aside) are token means over the same normalizer (so
    they add across micro-batches), except `is_weight_max` (combine with max).
    """
    mask = mask.astype(jnp.float32)
    norm = jnp.maximum(jnp.sum(mask), 1.0) if normalizer is None else normalizer

    def reduce(x: Array) -> Array:  # metrics: token means over `normalizer`, whatever the loss's weighting
        return _masked_sum(x, mask) / norm

    old = jax.lax.stop_gradient(old_logprobs)
    sampler_logprobs = jnp.where(jnp.isnan(sampler_logprobs), old, sampler_logprobs)
    if tempered_logprobs is not None:
        sampler_logprobs = sampler_logprobs + jax.lax.stop_gradient(tempered_logprobs) - old
    log_ratio = logprobs - old
    ratio = jnp.exp(log_ratio)
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = -jnp.minimum(ratio * advantages, clipped * advantages)
    weight = jax.lax.stop_gradient(jnp.minimum(jnp.exp(old - sampler_logprobs), is_cap))
    per_token = weight * pg
    metrics: dict[str, Array] = {}
    if ref_logprobs is not None:
        d = jax.lax.stop_gradient(ref_logprobs) - logprobs
        kl = jnp.exp(d) - d - 1.0
        if kl_clip > 0:
            kl = jnp.clip(kl, -kl_clip, kl_clip)
        metrics["kl"] = reduce(jax.lax.stop_gradient(kl))
        if kl_coef:
            per_token = per_token + kl_coef * kl
    if entropy is not None:
        metrics["entropy"] = reduce(jax.lax.stop_gradient(entropy))
        if entropy_coef:
            per_token = per_token - entropy_coef * entropy
    loss = reduce(per_token) if token_weights is None else _masked_sum(per_token * token_weights, mask)
    ratio_sg = jax.lax.stop_gradient(ratio)
    low = (advantages < 0) & (ratio_sg < 1.0 - clip_low)
    high = (advantages > 0) & (ratio_sg > 1.0 + clip_high)
    metrics.update(
        loss=jax.lax.stop_gradient(loss),
        pg_loss=reduce(jax.lax.stop_gradient(weight * pg)),
        clip_frac_low=reduce(low.astype(jnp.float32)),
        clip_frac_high=reduce(high.astype(jnp.float32)),
        ratio_mean=reduce(ratio_sg),
        is_weight_mean=reduce(weight),
        is_truncated_frac=reduce((jnp.exp(old - sampler_logprobs) > is_cap).astype(jnp.float32)),
        is_weight_max=jnp.max(jnp.where(mask > 0, weight, 0.0)),
        sampler_kl=reduce(jax.lax.stop_gradient(sampler_logprobs - old)),
    )
    return loss, metrics


def cross_entropy_loss(
    logprobs: Array, mask: Array, *, normalizer: Array | float | None = None
) -> tuple[Array, dict[str, Array]]:
    """Masked negative log-likelihood, token mean over `mask` (the supervised warm start)."""
    mask = mask.astype(jnp.float32)
    norm = jnp.maximum(jnp.sum(mask), 1.0) if normalizer is None else normalizer
    loss = -_masked_sum(logprobs, mask) / norm
    return loss, {"loss": jax.lax.stop_gradient(loss)}
