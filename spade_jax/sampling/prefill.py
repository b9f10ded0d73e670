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


def chunk_len(
    batch: int, query_slots: int, num_heads: int, score_budget: int = SCORE_BUDGET, key_slots: int = 0
) -> int:
    """Query rows per prefill chunk: query_slots halved while the scores batch * heads * chunk * key_slots
    (default query_slots) exceed the budget (and the halves stay whole and at least 16 rows)."""
    c, keys = query_slots, key_slots or query_slots
    while c % 2 == 0 and c > 16 and batch * num_heads * c * keys > score_budget:
        c //= 2
    return c


def _fill(model, tokens, positions, cache: KVCache, col0: int, visible, first=0) -> tuple[jax.Array, KVCache]:
    """Runs tokens [B, T] (positions [B, T]) through the model in query chunks, writing their keys and values at
    cache columns [col0, col0 + T); `visible(q_cols [c]) -> bool [B, c, S]` says which columns a chunk's queries
    attend. Chunks before `first` (traced) are skipped. Returns (logits of the last token [B, V], cache)."""
    b, t = tokens.shape
    c = chunk_len(b, t, model.cfg.num_heads, key_slots=cache.length)

    def run(start, kv):
        tok = jax.lax.dynamic_slice(tokens, (0, start), (b, c))
        pos = jax.lax.dynamic_slice(positions, (0, start), (b, c))
        q_cols = col0 + start + jnp.arange(c, dtype=jnp.int32)
        return model(tok, pos, cache=kv, cache_index=col0 + start, attn_mask=visible(q_cols), return_hidden=True)

    n = t // c
    if n > 1:
        cache = jax.lax.fori_loop(jnp.minimum(first, n - 1), n - 1, lambda j, kv: run(j * c, kv)[1], cache)
    hidden, cache = run((n - 1) * c, cache)
    return constrain(model.logits(hidden[:, -1]), ("batch", "vocab")), cache


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

    def visible(q_cols):
        return (slots[None, None, :] <= q_cols[None, :, None]) & (slots[None, None, :] >= pad_len[:, None, None])

    cache = KVCache.zeros(cfg, b, p) if prefix is None else place_prefix(prefix, pad_len, p)
    logits, cache = _fill(model, tokens, positions, cache, 0, visible, 0 if prefix is None else start // c)
    return logits, cache.grow(cache_len)


def extend(model, cache: KVCache, tokens: jax.Array, reused: jax.Array, new: jax.Array) -> tuple[jax.Array, KVCache]:
    """Continues rows whose first `reused` [B] tokens are already in `cache` [B, .., P], at columns
    [P - Q - reused, P - Q): tokens int32 [B, Q] are the next ones, left-padded (row b's `new` [B] real ones at
    [Q - new, Q)), written at columns [P - Q, P). Pad columns between the two parts are masked, so each row
    sees exactly its reused tokens then its new ones. Returns (logits after the last token [B, V], cache)."""
    b, q = tokens.shape
    p = cache.length
    cols = jnp.arange(p, dtype=jnp.int32)
    lo, hole_hi = p - q - reused, p - new
    positions = jnp.maximum(reused[:, None] + jnp.arange(q, dtype=jnp.int32)[None, :] - (q - new)[:, None], 0)

    def visible(q_cols):
        c, qc = cols[None, None, :], q_cols[None, :, None]
        inside = (c >= lo[:, None, None]) & ((c < p - q) | (c >= hole_hi[:, None, None]))
        return ((c <= qc) & inside) | (c == qc)  # a pad query sees itself only (never an empty row)

    return _fill(model, tokens, positions, cache, p - q, visible)
