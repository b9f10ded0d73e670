"""The compiled decode loop: one token per row per step, inside `lax.while_loop`, with on-device stop checks.

Every row of the batch is a slot of the decode engine (engine.py): rows hold requests admitted at different
times, with settings of their own (temperature, top-k, top-p, greedy, stop tokens and sequences, budget, random
key). All rows write their new keys and values at one cache column (`DecodeState.column`, the same for every
row); a row's own tokens sit at columns [pad_len, column), so its positions are `column - pad_len`.

Each step draws a token per row, updates the stop state, and runs the model's own one-token forward
(`Transformer.decode`) on it; the KV cache is the model's (`KVCache`). No part of the network lives here.
A row's random draw at its n-th token is `uniform(fold_in(row key, n))`: it depends on its own key and token
count only, never on which other rows share the batch.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from spade_jax.model.kv_cache import DecodeLayouts, KVCache
from spade_jax.sampling import sampling_fns

# finish codes kept on device; the sampler maps them to Completion.finish_reason
RUNNING, EOS, STOP_SEQ, LENGTH, CONTEXT, HOST_STOP = 0, 1, 2, 3, 4, 5


@flax.struct.dataclass
class DecodeState:
    """What the loop changes, carried between steps and between compiled chunks (all on device)."""

    logits: jax.Array  # float32 [B, V]: the model's prediction for the next token of each row
    generated: jax.Array  # int32 [B]: tokens generated so far per row
    column: jax.Array  # int32 []: the cache column the next token's keys and values go to (all rows)
    done: jax.Array  # bool [B]: finished rows and free slots
    finish: jax.Array  # int32 [B]: RUNNING / EOS / STOP_SEQ / LENGTH / CONTEXT / HOST_STOP
    recent: jax.Array  # int32 [B, L]: the last L generated tokens (-1 before the first), for stop sequences


@flax.struct.dataclass
class RowConsts:
    """Per-row settings that do not change while a row decodes (traced, so new values never recompile)."""

    pad_len: jax.Array  # int32 [B]: the row's first column (columns before it are never attended)
    budget: jax.Array  # int32 [B]: max tokens this row may generate
    budget_code: jax.Array  # int32 [B]: LENGTH or CONTEXT, whichever limit the budget came from
    greedy: jax.Array  # bool [B]: argmax decoding
    temperature: jax.Array  # float32 [B]
    top_k: jax.Array  # int32 [B] (0: off)
    top_p: jax.Array  # float32 [B] (1: off)
    keys: jax.Array  # uint32 [B, ...]: the row's PRNG key data
    stop_ids: jax.Array  # int32 [B, n]: eos + stop tokens, padded with -1
    stop_seqs: jax.Array  # int32 [B, m, L]: right-aligned stop token sequences, left-filled with -2
    stop_used: jax.Array  # bool [B, m, L]: which positions of stop_seqs are part of a sequence


def _flush(cache: KVCache, chunk: KVCache, first, n) -> KVCache:
    """The cache with chunk slots [0, n) written at cache columns [first, first + n), one column at a time (every
    write in place; a whole-chunk write could be clamped at the cache's end). Moved as raw bits (unsigned ints
    of the same width): XLA:CPU has no bfloat16 dynamic-update-slice and took the whole cache through float32."""

    def bits(c: KVCache) -> KVCache:
        uint = jnp.dtype(f"uint{8 * c.k[0].dtype.itemsize}")
        return KVCache(k=[jax.lax.bitcast_convert_type(x, uint) for x in c.k],
                       v=[jax.lax.bitcast_convert_type(x, uint) for x in c.v])  # fmt: skip

    def body(j, c):
        k = [jax.lax.dynamic_update_slice(ck, jax.lax.dynamic_slice_in_dim(nk, j, 1, 3), (0, 0, 0, first + j))
             for ck, nk in zip(c.k, new.k)]  # fmt: skip
        v = [jax.lax.dynamic_update_slice(cv, jax.lax.dynamic_slice_in_dim(nv, j, 1, 2), (0, 0, first + j, 0))
             for cv, nv in zip(c.v, new.v)]  # fmt: skip
        return KVCache(k=k, v=v).constrained()

    new, dtype = bits(chunk), cache.k[0].dtype
    out = jax.lax.fori_loop(0, n, body, bits(cache))
    return KVCache(k=[jax.lax.bitcast_convert_type(x, dtype) for x in out.k],
                   v=[jax.lax.bitcast_convert_type(x, dtype) for x in out.v]).constrained()  # fmt: skip


def _stop_seq_hit(recent: jax.Array, consts: RowConsts) -> jax.Array:
    """bool [B]: the last generated tokens end with one of the row's stop sequences."""
    eq = (recent[:, None, :] == consts.stop_seqs) | ~consts.stop_used
    return jnp.any(jnp.all(eq, axis=-1) & jnp.any(consts.stop_used, axis=-1), axis=-1)


def _uniforms(keys: jax.Array, generated: jax.Array) -> jax.Array:
    """float32 [B]: row b's uniform for its token number generated[b]."""
    typed = jax.random.wrap_key_data(keys)
    return jax.vmap(lambda k, n: jax.random.uniform(jax.random.fold_in(k, n), (), jnp.float32))(typed, generated)


def decode_chunk(
    model,
    cache: KVCache,
    state: DecodeState,
    consts: RowConsts,
    n_steps,
    exit_done,
    *,
    width: int,
    layouts: DecodeLayouts | None = None,
):
    """Runs up to n_steps decode steps (n_steps traced, at most width); stops early once `exit_done` rows are
    done (traced: B stops when every row is, fewer lets the engine refill freed slots sooner).

    Each step draws a token per row from state.logits, records it, updates the per-row stop state, and runs the
    model on it (its k/v for cache column state.column). Returns (cache, state, tokens, logprobs,
    raw_logprobs), the last three [B, width] with -1 / 0 where a row was already done.

    Inside the loop the cache is only read: each step's keys and values go to a chunk buffer of `width`
    columns, written into the cache once the loop ends. A cache updated in the loop and read by the same
    step's attention was copied whole every step on XLA:CPU (measured, SmolLM2-135M at 2048 slots: 118 ms a
    step against 43 ms at 256).
    """
    b = state.logits.shape[0]
    first = state.column  # the cache column of this chunk's first token
    chunk0 = KVCache.zeros(model.cfg, b, width).constrained()
    out_tok = jnp.full((b, width), -1, jnp.int32)
    out_lp = jnp.zeros((b, width), jnp.float32)
    out_raw = jnp.zeros((b, width), jnp.float32)
    n_steps = jnp.minimum(n_steps, width)

    def cond(carry):
        i, _, st, *_ = carry
        return (i < n_steps) & (jnp.sum(st.done.astype(jnp.int32)) < exit_done)

    def body(carry):
        i, chunk, st, out_tok, out_lp, out_raw = carry
        u = _uniforms(consts.keys, st.generated)
        tok, lp, raw = sampling_fns.pick(st.logits, u, consts.temperature, consts.top_k, consts.top_p, consts.greedy)
        live = ~st.done
        tok = jnp.where(live, tok, -1)
        out_tok = jax.lax.dynamic_update_slice(out_tok, tok[:, None], (0, i))
        out_lp = jax.lax.dynamic_update_slice(out_lp, jnp.where(live, lp, 0.0)[:, None], (0, i))
        out_raw = jax.lax.dynamic_update_slice(out_raw, jnp.where(live, raw, 0.0)[:, None], (0, i))
        generated = st.generated + live.astype(jnp.int32)
        recent = jnp.where(live[:, None], jnp.concatenate([st.recent[:, 1:], tok[:, None]], axis=1), st.recent)
        is_eos = jnp.any(tok[:, None] == consts.stop_ids, axis=-1)
        is_seq = _stop_seq_hit(recent, consts)
        at_budget = generated >= consts.budget
        code = jnp.where(is_eos, EOS, jnp.where(is_seq, STOP_SEQ, consts.budget_code))
        newly = live & (is_eos | is_seq | at_budget)
        finish = jnp.where(newly, code, st.finish)
        done = st.done | newly
        # feed the token back (done rows feed a harmless 0 at a column no live row attends)
        positions = st.column - consts.pad_len
        logits, chunk = model.decode(
            jnp.maximum(tok, 0), positions, cache, st.column, consts.pad_len, layouts=layouts, chunk=chunk,
            chunk_index=i,
        )  # fmt: skip
        st = DecodeState(logits=logits, generated=generated, column=st.column + 1, done=done, finish=finish,
                         recent=recent)  # fmt: skip
        return i + 1, chunk, st, out_tok, out_lp, out_raw

    carry = (jnp.int32(0), chunk0, state, out_tok, out_lp, out_raw)
    taken, chunk, state, out_tok, out_lp, out_raw = jax.lax.while_loop(cond, body, carry)
    return _flush(cache, chunk, first, taken), state, out_tok, out_lp, out_raw
