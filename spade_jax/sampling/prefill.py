"""Prefill: run left-padded prompts through the model, fill the KV cache, return the next-token logits.

Long prompts go through in chunks of query rows (a `fori_loop`), so the attention scores never exceed
about `score_budget` floats however long the prompt or large the batch; only the last position's hidden
state is projected onto the vocabulary.

A prefix that every row shares (the designer's contract, an environment's first observation) can be given
as its one-row KV (`prefix_kv`): it is placed at each row's own slots and the chunks before `start` are
skipped. Keys and values depend on positions, not slots, so each row still sees what it would see alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from spade_jax.model.kv_cache import KVCache
from spade_jax.model.sharding import constrain

SCORE_BUDGET = 64 * 2**20  # float32 attention scores per chunk (256 MiB)


def chunk_len(batch: int, prompt_slots: int, num_heads: int, score_budget: int = SCORE_BUDGET) -> int:
    """Query rows per prefill chunk: prompt_slots halved while the scores batch * heads * chunk * prompt_slots
    exceed the budget (and the halves stay whole and at least 16 rows)."""
    c = prompt_slots
    while c % 2 == 0 and c > 16 and batch * num_heads * c * prompt_slots > score_budget:
        c //= 2
    return c


def prefix_kv(model, tokens: jax.Array) -> KVCache:
    """The one-row cache of tokens int32 [1, L] (right-padded is fine: a slot depends only on those before)."""
    return prefill(model, tokens, jnp.zeros((1,), jnp.int32), cache_len=tokens.shape[1])[1]


def place_prefix(prefix: KVCache, pad_len: jax.Array, slots: int) -> KVCache:
    """A [B, .., slots] cache holding the one-row `prefix` at each row's slots [pad_len[b], pad_len[b] + L),
    zeros elsewhere."""
    src = jnp.arange(slots, dtype=jnp.int32)[None, :] - pad_len[:, None]  # [B, slots]: prefix slot or out of it
    inside = (src >= 0) & (src < prefix.length)
    idx = jnp.clip(src, 0, prefix.length - 1)
    k = [jnp.where(inside[:, None, None], jnp.moveaxis(jnp.take(x[0], idx, axis=-1), 2, 0), 0) for x in prefix.k]
    v = [jnp.where(inside[:, None, :, None], jnp.moveaxis(jnp.take(x[0], idx, axis=1), 1, 0), 0) for x in prefix.v]
    return KVCache(k=k, v=v).constrained()


def prefill(
    model,
    tokens: jax.Array,
    pad_len: jax.Array,
    *,
    cache_len: int,
    prefix: KVCache | None = None,
    start: jax.Array | int = 0,
) -> tuple[jax.Array, KVCache]:
    """tokens int32 [B, P] left-padded (row b starts at slot pad_len[b]) -> (float32 logits [B, V], cache).

    Each row sees exactly what it would see alone: positions count from its first real token, and its pad
    slots are masked out of every attention. The returned cache has cache_len >= P slots, the first P filled.
    With `prefix` (`prefix_kv` of the first L tokens every row starts with), slots before `start` (at most
    min(pad_len) + L) come from it and only the query chunks from `start` on are computed.
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

    cache = KVCache.zeros(cfg, b, p) if prefix is None else place_prefix(prefix, pad_len, p)
    n = p // c
    if n > 1:
        first = 0 if prefix is None else jnp.minimum(start // c, n - 1)
        cache = jax.lax.fori_loop(first, n - 1, lambda j, kv: run(j * c, kv)[1], cache)
    hidden, cache = run((n - 1) * c, cache)
    logits = model.logits(hidden[:, -1])

    return constrain(logits, ("batch", "vocab")), cache.grow(cache_len)
