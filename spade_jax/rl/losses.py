"""Per-token log-probs and the two learner losses: clipped policy gradient (RL) and masked cross-entropy (SFT).

All per-token arrays follow `rl.batch`'s alignment: value [n, t] belongs to token t. Losses are token-level
means over the mask: sum(loss * mask) / normalizer, where normalizer defaults to sum(mask). Passing the
token count of the whole batch as normalizer makes micro-batch losses (and metrics) add up exactly to the
full-batch ones.
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
) -> tuple[Array, Array | None]:
    """log p(tokens[:, t] | hidden[:, t-1]) for every t (0 at t=0), and the entropy of that distribution.

    logits_fn maps hidden states [B, c, E] to float32 logits [B, c, V]. With chunk_size > 0 the sequence is
    processed in chunks of that many positions under `jax.checkpoint`, so at most one chunk of [B, c, V]
    logits is alive in the forward and backward passes (the full [B, T, V] never exists).
    """
    b, t = tokens.shape
    h, tgt = hidden[:, :-1], tokens[:, 1:]

    def one(h_c: Array, tgt_c: Array) -> tuple[Array, Array]:
        logits = logits_fn(h_c).astype(jnp.float32)
        lse = jax.nn.logsumexp(logits, axis=-1)
        lp = jnp.take_along_axis(logits, tgt_c[..., None], axis=-1)[..., 0] - lse
        if not with_entropy:
            return lp, jnp.zeros_like(lp)
        ent = lse - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1)
        return lp, ent

    n = t - 1
    if chunk_size <= 0 or chunk_size >= n:
        lp, ent = one(h, tgt)
    else:
        chunks = -(-n // chunk_size)
        pad = chunks * chunk_size - n
        h = jnp.pad(h, ((0, 0), (0, pad), (0, 0)))
        tgt = jnp.pad(tgt, ((0, 0), (0, pad)))
        hc = h.reshape(b, chunks, chunk_size, h.shape[-1]).swapaxes(0, 1)
        tc = tgt.reshape(b, chunks, chunk_size).swapaxes(0, 1)
        body = jax.checkpoint(lambda xs: one(*xs))
        lp, ent = jax.lax.map(body, (hc, tc))
        lp = lp.swapaxes(0, 1).reshape(b, -1)[:, :n]
        ent = ent.swapaxes(0, 1).reshape(b, -1)[:, :n]
    zero = jnp.zeros((b, 1), jnp.float32)
    lp = jnp.concatenate([zero, lp], axis=1)
    ent = jnp.concatenate([zero, ent], axis=1) if with_entropy else None
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
) -> tuple[Array, dict[str, Array]]:
    """PPO-clipped policy gradient with truncated importance sampling; token mean over `mask`.

    Per token: ratio = exp(logp - old_logp); pg = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A);
    the importance weight w = min(exp(old_logp - sampler_logp), is_cap) (no gradient) corrects for the sampler
    not being the learner (different numerics, or a stale policy version; NaN sampler log-probs mean unknown and
    give weight 1); loss = w * pg + kl_coef * k3
    - entropy_coef * entropy, with k3 = exp(ref - logp) - (ref - logp) - 1. Metrics are means over the same
    normalizer (so they add across micro-batches), except `is_weight_max` (combine with max).
    """
    mask = mask.astype(jnp.float32)
    norm = jnp.maximum(jnp.sum(mask), 1.0) if normalizer is None else normalizer
    old = jax.lax.stop_gradient(old_logprobs)
    sampler_logprobs = jnp.where(jnp.isnan(sampler_logprobs), old, sampler_logprobs)
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
        metrics["kl"] = _masked_sum(jax.lax.stop_gradient(kl), mask) / norm
        if kl_coef:
            per_token = per_token + kl_coef * kl
    if entropy is not None:
        metrics["entropy"] = _masked_sum(jax.lax.stop_gradient(entropy), mask) / norm
        if entropy_coef:
            per_token = per_token - entropy_coef * entropy
    loss = _masked_sum(per_token, mask) / norm
    ratio_sg = jax.lax.stop_gradient(ratio)
    low = (advantages < 0) & (ratio_sg < 1.0 - clip_low)
    high = (advantages > 0) & (ratio_sg > 1.0 + clip_high)
    metrics.update(
        loss=jax.lax.stop_gradient(loss),
        pg_loss=_masked_sum(jax.lax.stop_gradient(weight * pg), mask) / norm,
        clip_frac_low=_masked_sum(low.astype(jnp.float32), mask) / norm,
        clip_frac_high=_masked_sum(high.astype(jnp.float32), mask) / norm,
        ratio_mean=_masked_sum(ratio_sg, mask) / norm,
        is_weight_mean=_masked_sum(weight, mask) / norm,
        is_truncated_frac=_masked_sum((jnp.exp(old - sampler_logprobs) > is_cap).astype(jnp.float32), mask) / norm,
        is_weight_max=jnp.max(jnp.where(mask > 0, weight, 0.0)),
        sampler_kl=_masked_sum(jax.lax.stop_gradient(sampler_logprobs - old), mask) / norm,
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
