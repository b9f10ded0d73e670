"""Per-token log-probs and the two learner losses: clipped policy gradient (RL) and masked cross-entropy (SFT).

All per-token arrays follow `rl.batch`'s alignment: value [n, t] belongs to token t. Losses are token-level
means over the mask: sum(loss * mask) / normalizer, where normalizer defaults to sum(mask). Passing the
token count of the whole batch as normalizer makes micro-batch losses (and metrics) add up exactly to the
full-batch ones. With `token_weights` (the reference's per-sample mean over a fixed batch: each token weighs
1 / (its sample's tokens x the global batch)) the loss is sum(loss * mask * weight) instead, which adds up
across micro-batches the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

Array = jax.Array


def token_logprobs(
    logits_fn: Callable[[Array], Array],
    hidden: Array,
    tokens: Array,
    *,
    chunk_size: int = 0,
    with_entropy: bool = True,
    tempered_at: float = 0.0,
) -> tuple[Array, ...]:
    """log p(tokens[:, t] | hidden[:, t-1]) for every t (0 at t=0), and the entropy of that distribution;
    with `tempered_at` T > 0 also log softmax(logits / T) at the token (no gradient: the sampler's log-prob at
    temperature T without top-k/top-p, what the reference's TIS divides by), as a third array.

    logits_fn maps hidden states [B, c, E] to float32 logits [B, c, V]. With chunk_size > 0 the sequence is
    processed in chunks of that many positions under `jax.checkpoint`, so at most one chunk of [B, c, V]
    logits is alive in the forward and backward passes (the full [B, T, V] never exists).
    """
    b, t = tokens.shape
    h, tgt = hidden[:, :-1], tokens[:, 1:]

    def one(h_c: Array, tgt_c: Array) -> tuple[Array, Array, Array]:
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
        body = jax.checkpoint(lambda xs: one(*xs))
        lp, ent, lpt = jax.lax.map(body, (hc, tc))
        lp, ent, lpt = (x.swapaxes(0, 1).reshape(b, -1)[:, :n] for x in (lp, ent, lpt))
    zero = jnp.zeros((b, 1), jnp.float32)
    lp = jnp.concatenate([zero, lp], axis=1)
    ent = jnp.concatenate([zero, ent], axis=1) if with_entropy else None
    if tempered_at > 0:
        return lp, ent, jnp.concatenate([zero, lpt], axis=1)
    return lp, ent


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
