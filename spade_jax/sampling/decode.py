"""The compiled decode loop: one token per row per step, inside `lax.while_loop`, with on-device stop checks.

The per-token forward reuses the model's own submodules (norms, projections, RoPE, MLP, vocab projection)
but keeps its own KV cache (`DecodeCache`): keys as [B, kv_heads, head_dim, S] and values as
[B, kv_heads, S, head_dim], the layouts in which both attention contractions of a single query reduce over a
non-minor axis (head_dim for the scores, S for the output) and so vectorise along the contiguous one. XLA
then reads each cache slot once per step (the [B, S, kv_heads, D] layout of the model's own cache made it
transpose the whole cache every step; keys as [.., S, D] cost ~20% more at batch 32 than [.., D, S]).
"""

from __future__ import annotations

import functools
import itertools

import flax.struct
import jax
import jax.numpy as jnp

from spade_jax.model.rope import apply_rope, inv_frequencies
from spade_jax.model.sharding import constrain
from spade_jax.model.transformer import MLP
from spade_jax.sampling import sampling_fns

_NEG_INF = -1e30
K_AXES = ("batch", "kv_heads", "head_dim", "length")
V_AXES = ("batch", "kv_heads", "length", "head_dim")

# finish codes kept on device; the sampler maps them to Completion.finish_reason
RUNNING, EOS, STOP_SEQ, LENGTH, CONTEXT, HOST_STOP = 0, 1, 2, 3, 4, 5


@flax.struct.dataclass
class DecodeCache:
    """Per-layer keys [B, kv_heads, head_dim, S] and values [B, kv_heads, S, head_dim]; slot s holds the token at
    left-padded position s."""

    k: list[jax.Array]
    v: list[jax.Array]

    @classmethod
    def zeros(cls, cfg, batch: int, length: int) -> DecodeCache:
        """An empty cache for `cfg`, in its compute dtype."""
        kvh, d, dt = cfg.num_kv_heads, cfg.head_dim, cfg.jnp_dtype
        k = [jnp.zeros((batch, kvh, d, length), dt) for _ in range(cfg.num_layers)]
        v = [jnp.zeros((batch, kvh, length, d), dt) for _ in range(cfg.num_layers)]
        return cls(k=k, v=v)

    @property
    def length(self) -> int:
        return self.v[0].shape[2]

    def grow(self, length: int) -> DecodeCache:
        """The same cache with more (empty) slots at the end."""
        n = length - self.length
        k = [constrain(jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, n))), K_AXES) for x in self.k]
        v = [constrain(jnp.pad(x, ((0, 0), (0, 0), (0, n), (0, 0))), V_AXES) for x in self.v]
        return DecodeCache(k=k, v=v)


@flax.struct.dataclass
class DecodeState:
    """Everything the loop carries between steps and between compiled chunks (all on device)."""

    logits: jax.Array  # float32 [B, V]: the model's prediction for the next token of each row
    generated: jax.Array  # int32 [B]: tokens generated so far per row (equal for all rows while they run)
    step: jax.Array  # int32 []: decode steps taken (= next cache slot - prompt_len)
    done: jax.Array  # bool [B]
    finish: jax.Array  # int32 [B]: RUNNING / EOS / STOP_SEQ / LENGTH / CONTEXT / HOST_STOP
    recent: jax.Array  # int32 [B, L]: the last L generated tokens (-1 before the first), for stop sequences
    key: jax.Array  # PRNG key


@flax.struct.dataclass
class DecodeConsts:
    """Per-call inputs that do not change during decoding (traced, so new values never recompile)."""

    prompt_slots: jax.Array  # int32 []: padded prompt length P (the first generated token goes to slot P)
    pad_len: jax.Array  # int32 [B]: left padding of each row (its slots [0, pad_len) are never attended)
    budget: jax.Array  # int32 [B]: max tokens this row may generate
    budget_code: jax.Array  # int32 [B]: LENGTH or CONTEXT, whichever limit the budget came from
    temperature: jax.Array  # float32 []
    top_k: jax.Array  # int32 []
    top_p: jax.Array  # float32 []
    stop_ids: jax.Array  # int32 [n]: eos + stop tokens, padded with -1
    stop_seqs: jax.Array  # int32 [m, L]: right-aligned stop token sequences, left-filled with -2 (matches nothing)
    stop_used: jax.Array  # bool [m, L]: which positions of stop_seqs are part of the sequence


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
    return jnp.where(valid[:, None, None, :], scores * head_dim**-0.5, _NEG_INF)


def _weighted(probs: jax.Array, vc: jax.Array) -> jax.Array:
    """float32 [B, K, G, D]: probs [B, K, G, S] (unnormalised) times values vc [B, K, S, D]."""
    probs = probs.astype(vc.dtype)
    if probs.shape[0] == 1:
        return jnp.einsum("bkgs,bksd->bkgd", probs, vc, preferred_element_type=jnp.float32)
    return (probs[..., None] * vc[:, :, None, :, :]).sum(-2).astype(jnp.float32)


def _attention(q: jax.Array, parts: list[tuple[jax.Array, jax.Array, jax.Array]], head_dim: int) -> jax.Array:
    """q [B, K, G, D] over one softmax spanning every (keys [B, K, D, S], values [B, K, S, D], valid [B, S]) part
    (the run's cache and the current chunk's own slots) -> [B, K, G, D]."""
    scores = [_scores(q, k, valid, head_dim) for k, _, valid in parts]
    top = functools.reduce(jnp.maximum, [s.max(-1, keepdims=True) for s in scores])
    exps = [jnp.exp(s - top) for s in scores]
    total = sum(e.sum(-1, keepdims=True) for e in exps)
    out = sum(_weighted(e, v) for e, (_, v, _) in zip(exps, parts))
    return (out / total).astype(q.dtype)


def head_matrix(model) -> jax.Array | None:
    """The tied embedding as an [E, V] matrix, the layout the CPU GEMM library (YNNPACK) takes for batches of
    2 or more rows; at batch 1 the embedding's own [V, E] layout is faster (see `matvec_kernels`). None when
    untied."""
    if not model.cfg.tie_embeddings:
        return None
    return constrain(model.embed_tokens.embedding[...].T, (None, "vocab"))


def matvec_kernels(model) -> list[dict[str, jax.Array]]:
    """Each layer's projection kernels transposed to [out, in] for batch-1 decoding, q/k/v and gate/up each
    stacked into one matrix ("qkv", "gate_up"; also "o", "down"): XLA's matrix-vector code streams weights ~25%
    faster in this layout than in [in, out] (measured on SmolLM2-135M, float32, CPU), and at batch 1 decoding is
    bound by that stream. MoE layers keep their own experts."""
    out = []
    for layer in model.layers:
        a = layer.attn
        kt = lambda *lins: jnp.concatenate([lin.kernel[...].T for lin in lins], axis=0)
        mats = {"qkv": kt(a.q_proj, a.k_proj, a.v_proj), "o": kt(a.o_proj)}
        if isinstance(layer.mlp, MLP):
            mats.update(gate_up=kt(layer.mlp.gate_proj, layer.mlp.up_proj), down=kt(layer.mlp.down_proj))
        out.append(mats)
    return out


def logits_of(model, hidden: jax.Array, head: jax.Array | None) -> jax.Array:
    """float32 logits [B, V] from final hidden states [B, E] (same values as `model.logits`)."""
    if head is None:
        if not model.cfg.tie_embeddings:
            return model.lm_head(hidden).astype(jnp.float32)
        head = model.embed_tokens.embedding[...].T
    if head.dtype == jnp.bfloat16:
        return jnp.dot(hidden.astype(head.dtype), head, preferred_element_type=jnp.float32)
    return jnp.dot(hidden, head.astype(hidden.dtype), preferred_element_type=jnp.float32)


def _linears(lins: tuple, x: jax.Array, kernel_t: jax.Array | None) -> list[jax.Array]:
    """[lin(x) for lin in lins], from their kernels stacked as [sum of outs, in] (`matvec_kernels`) when given,
    with the same arithmetic (bfloat16 weights: a bfloat16 matmul accumulating in float32)."""
    if kernel_t is None:
        return [lin(x) for lin in lins]
    dims = (((x.ndim - 1,), (1,)), ((), ()))
    if kernel_t.dtype == jnp.bfloat16 and x.dtype == jnp.float32:
        y = jax.lax.dot_general(x.astype(kernel_t.dtype), kernel_t, dims, preferred_element_type=jnp.float32)
    else:
        y = jax.lax.dot_general(x, kernel_t.astype(x.dtype), dims)
    ends = list(itertools.accumulate(lin.kernel.shape[1] for lin in lins))
    parts = jnp.split(y, ends[:-1], axis=-1)
    return [p + lin.bias[...].astype(p.dtype) if lin.use_bias else p for p, lin in zip(parts, lins)]


def _mlp(mlp, x: jax.Array, kt: dict[str, jax.Array]) -> jax.Array:
    if not isinstance(mlp, MLP):
        return mlp(x)  # MoE
    gate, up = _linears((mlp.gate_proj, mlp.up_proj), x, kt.get("gate_up"))
    return _linears((mlp.down_proj,), jax.nn.silu(gate) * up, kt.get("down"))[0]


def forward_one(
    model,
    tokens: jax.Array,
    positions: jax.Array,
    cache: DecodeCache,
    slot,
    pad_len: jax.Array,
    head=None,
    kernels_t: list[dict[str, jax.Array]] | None = None,
    *,
    chunk: DecodeCache | None = None,
    chunk_index=None,
):
    """One new token per row at cache slot `slot`: returns (float32 logits [B, V], updated cache).

    Same arithmetic as `Transformer.__call__` with T = 1 (parity is tested against a full forward). head: the
    [E, V] output matrix from `head_matrix` (None: the model's own projection); kernels_t: the projections as
    [out, in] from `matvec_kernels` (None: the model's own kernels). With `chunk` (the keys/values of the
    current decode chunk, slot `chunk_index` of it being `slot`), the cache is only read, for slots before the
    chunk, the new k/v goes into the chunk, and the updated chunk is returned instead of the cache.
    """
    cfg = model.cfg
    b = tokens.shape[0]
    nh, kvh, g, d = cfg.num_heads, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
    dt = cfg.jnp_dtype
    inv_freq, rope_scale = inv_frequencies(d, cfg.rope_theta, cfg.rope_scaling)
    table = constrain(model.embed_tokens.embedding[...], ("vocab", None))
    x = constrain(jnp.take(table, tokens, axis=0).astype(dt), ("batch", "embed"))
    into, at = (cache, slot) if chunk is None else (chunk, chunk_index)
    first = slot + 1 if chunk is None else slot - chunk_index  # the cache slots before `first` are attended
    slots = jnp.arange(cache.length, dtype=jnp.int32)
    valid = (slots[None, :] >= pad_len[:, None]) & (slots[None, :] < first)
    if chunk is not None:
        own = jnp.arange(chunk.length, dtype=jnp.int32) <= chunk_index
        own = jnp.broadcast_to(own[None, :], (b, chunk.length))
    pos = positions[:, None]
    new_k, new_v = [], []
    for i, layer in enumerate(model.layers):
        attn, kt = layer.attn, kernels_t[i] if kernels_t is not None else {}
        h = layer.input_layernorm(x)
        q, k, v = _linears((attn.q_proj, attn.k_proj, attn.v_proj), h, kt.get("qkv"))
        q, k, v = q.reshape(b, 1, nh, d), k.reshape(b, 1, kvh, d), v.reshape(b, 1, kvh, d)
        if cfg.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = apply_rope(q, pos, inv_freq, rope_scale)
        k = apply_rope(k, pos, inv_freq, rope_scale)
        kn = jax.lax.dynamic_update_slice(into.k[i], k.transpose(0, 2, 3, 1).astype(into.k[i].dtype), (0, 0, 0, at))
        vn = jax.lax.dynamic_update_slice(into.v[i], v.transpose(0, 2, 1, 3).astype(into.v[i].dtype), (0, 0, at, 0))
        kn, vn = constrain(kn, K_AXES), constrain(vn, V_AXES)
        new_k.append(kn)
        new_v.append(vn)
        parts = [(kn, vn, valid)] if chunk is None else [(cache.k[i], cache.v[i], valid), (kn, vn, own)]
        out = _attention(q.reshape(b, kvh, g, d), parts, d)
        x = x + _linears((attn.o_proj,), out.reshape(b, nh * d), kt.get("o"))[0]
        x = constrain(x + _mlp(layer.mlp, layer.post_attention_layernorm(x), kt), ("batch", "embed"))
    logits = logits_of(model, model.norm(x), head)
    return constrain(logits, ("batch", "vocab")), DecodeCache(k=new_k, v=new_v)


def _flush(cache: DecodeCache, chunk: DecodeCache, first, n) -> DecodeCache:
    """The cache with chunk slots [0, n) written at cache slots [first, first + n), one slot at a time (every
    write in place; a whole-chunk write could be clamped at the cache's end)."""

    def body(j, c):
        k = [jax.lax.dynamic_update_slice(ck, jax.lax.dynamic_slice_in_dim(nk, j, 1, 3), (0, 0, 0, first + j))
             for ck, nk in zip(c.k, chunk.k)]  # fmt: skip
        v = [jax.lax.dynamic_update_slice(cv, jax.lax.dynamic_slice_in_dim(nv, j, 1, 2), (0, 0, first + j, 0))
             for cv, nv in zip(c.v, chunk.v)]  # fmt: skip
        return DecodeCache(k=[constrain(x, K_AXES) for x in k], v=[constrain(x, V_AXES) for x in v])

    return jax.lax.fori_loop(0, n, body, cache)


def _stop_seq_hit(recent: jax.Array, consts: DecodeConsts) -> jax.Array:
    """bool [B]: the last generated tokens end with one of the stop sequences."""
    eq = (recent[:, None, :] == consts.stop_seqs[None]) | ~consts.stop_used[None]
    return jnp.any(jnp.all(eq, axis=-1) & jnp.any(consts.stop_used, axis=-1)[None], axis=-1)


def decode_chunk(
    model,
    cache: DecodeCache,
    state: DecodeState,
    consts: DecodeConsts,
    n_steps,
    *,
    mode: str,
    width: int,
    head=None,
    kernels_t=None,
):
    """Runs up to n_steps decode steps (stops early when every row is done; n_steps is traced, at most width).

    Each step draws a token per row from state.logits, records it, updates the per-row stop state, and runs the
    model on it (its k/v for cache slot prompt_slots + step). Returns (cache, state, tokens, logprobs,
    raw_logprobs), the last three [B, width] with -1 / 0 where a row had already finished.

    Inside the loop the cache is only read: each step's keys and values go to a chunk buffer of `width` slots,
    written into the cache once the loop ends. A cache updated in the loop and read by the same step's
    attention was copied whole every step on XLA:CPU (measured, SmolLM2-135M at 2048 slots: 118 ms a step
    against 43 ms at 256).
    """
    b = state.logits.shape[0]
    first = consts.prompt_slots + state.step  # the cache slot of this chunk's first token
    chunk0 = DecodeCache.zeros(model.cfg, b, width)
    chunk0 = DecodeCache(k=[constrain(x, K_AXES) for x in chunk0.k], v=[constrain(x, V_AXES) for x in chunk0.v])
    out_tok = jnp.full((b, width), -1, jnp.int32)
    out_lp = jnp.zeros((b, width), jnp.float32)
    out_raw = jnp.zeros((b, width), jnp.float32)
    n_steps = jnp.minimum(n_steps, width)

    def cond(carry):
        i, _, st, *_ = carry
        return (i < n_steps) & ~jnp.all(st.done)

    def body(carry):
        i, chunk, st, out_tok, out_lp, out_raw = carry
        key, sub = jax.random.split(st.key)
        tok, lp, raw = sampling_fns.pick(mode, st.logits, sub, consts.temperature, consts.top_k, consts.top_p)
        live = ~st.done
        tok = jnp.where(live, tok, -1)
        out_tok = jax.lax.dynamic_update_slice(out_tok, tok[:, None], (0, i))
        out_lp = jax.lax.dynamic_update_slice(out_lp, jnp.where(live, lp, 0.0)[:, None], (0, i))
        out_raw = jax.lax.dynamic_update_slice(out_raw, jnp.where(live, raw, 0.0)[:, None], (0, i))
        generated = st.generated + live.astype(jnp.int32)
        recent = jnp.concatenate([st.recent[:, 1:], tok[:, None]], axis=1)
        is_eos = jnp.any(tok[:, None] == consts.stop_ids[None, :], axis=-1)
        is_seq = _stop_seq_hit(recent, consts)
        at_budget = generated >= consts.budget
        code = jnp.where(is_eos, EOS, jnp.where(is_seq, STOP_SEQ, consts.budget_code))
        newly = live & (is_eos | is_seq | at_budget)
        finish = jnp.where(newly, code, st.finish)
        done = st.done | newly
        # feed the token back (finished rows feed a harmless 0; their slots are never read by live rows)
        slot = consts.prompt_slots + st.step
        positions = consts.prompt_slots - consts.pad_len + st.step
        tok_in = jnp.maximum(tok, 0)
        logits, chunk = forward_one(
            model, tok_in, positions, cache, slot, consts.pad_len, head, kernels_t, chunk=chunk, chunk_index=i
        )
        st = DecodeState(
            logits=logits, generated=generated, step=st.step + 1, done=done, finish=finish, recent=recent, key=key
        )
        return i + 1, chunk, st, out_tok, out_lp, out_raw

    carry = (jnp.int32(0), chunk0, state, out_tok, out_lp, out_raw)
    taken, chunk, state, out_tok, out_lp, out_raw = jax.lax.while_loop(cond, body, carry)
    return _flush(cache, chunk, first, taken), state, out_tok, out_lp, out_raw
