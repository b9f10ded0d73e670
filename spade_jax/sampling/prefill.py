"""Prefill: run left-padded prompts through the model, fill the KV cache, return the next-token logits.

Long prompts go through in chunks of query rows (a `fori_loop`), so the attention scores never exceed
about `score_budget` floats however long the prompt or large the batch; only the last position's hidden
state is projected onto the vocabulary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from spade_jax.model.sharding import constrain
from spade_jax.model.transformer import KVCache
from spade_jax.sampling.decode import K_AXES, V_AXES, DecodeCache

SCORE_BUDGET = 64 * 2**20  # float32 attention scores per chunk (256 MiB)


def chunk_len(batch: int, prompt_slots: int, num_heads: int, score_budget: int = SCORE_BUDGET) -> int:
    """Query rows per prefill chunk: prompt_slots halved while the scores batch * heads * chunk * prompt_slots
    exceed the budget (and the halves stay whole and at least 16 rows)."""
    c = prompt_slots
    while c % 2 == 0 and c > 16 and batch * num_heads * c * prompt_slots > score_budget:
        c //= 2
    return c


def prefill(model, tokens: jax.Array, pad_len: jax.Array, *, cache_len: int) -> tuple[jax.Array, DecodeCache]:
    """tokens int32 [B, P] left-padded (row b starts at slot pad_len[b]) -> (float32 logits [B, V], cache).

    Each row sees exactly what it would see alone: positions count from its first real token, and its pad
    slots are masked out of every attention. The returned cache has cache_len >= P slots, the first P filled.
    """
    cfg = model.cfg
    b, p = tokens.shape
    c = chunk_len(b, p, cfg.num_heads)
    slots = jnp.arange(p, dtype=jnp.int32)
    positions = jnp.maximum(slots[None, :] - pad_len[:, None], 0)

    def run(start, cache):
        tok = jax.lax.dynamic_slice(tokens, (0, start), (b, c))
        pos = jax.lax.dynamic_slice(positions, (0, start), (b, c))
        q_slot = start + jnp.arange(c, dtype=jnp.int32)
        mask = (slots[None, None, :] <= q_slot[None, :, None]) & (slots[None, None, :] >= pad_len[:, None, None])
        return model(tok, pos, cache=cache, cache_index=start, attn_mask=mask, return_hidden=True)

    cache = KVCache.zeros(cfg, b, p)
    n = p // c
    if n > 1:
        cache = jax.lax.fori_loop(0, n - 1, lambda j, kv: run(j * c, kv)[1], cache)
    hidden, cache = run((n - 1) * c, cache)
    logits = model.logits(hidden[:, -1])

    n = cache_len - p  # [B, P, K, D] -> keys [B, K, D, cache_len], values [B, K, cache_len, D]
    kpad, vpad = ((0, 0),) * 3 + ((0, n),), ((0, 0), (0, 0), (0, n), (0, 0))
    k = [constrain(jnp.pad(x.transpose(0, 2, 3, 1), kpad), K_AXES) for x in cache.k]
    v = [constrain(jnp.pad(x.transpose(0, 2, 1, 3), vpad), V_AXES) for x in cache.v]
    return constrain(logits, ("batch", "vocab")), DecodeCache(k=k, v=v)
