"""The compiled decode loop: one token per row per step, inside `lax.while_loop`, with on-device stop checks.

The per-token forward reuses the model's own submodules (norms, projections, RoPE, MLP, vocab projection)
but keeps its own KV cache (`DecodeCache`): keys as [B, kv_heads, head_dim, S] and values as
[B, kv_heads, S, head_dim], the layouts in which both attention contractions of a single query reduce over a
non-minor axis (head_dim for the scores, S for the output) and so vectorise along the contiguous one. XLA
then reads each cache slot once per step (the [B, S, kv_heads, D] layout of the model's own cache made it
transpose the whole cache every step; keys as [.., S, D] cost ~20% more at batch 32 than [.., D, S]).
"""

from __future__ import annotations

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


def _attention(q: jax.Array, kc: jax.Array, vc: jax.Array, valid: jax.Array, head_dim: int) -> jax.Array:
    """q [B, K, G, D] over the cache kc [B, K, D, S], vc [B, K, S, D], valid [B, S] -> [B, K, G, D].

    For several rows, written as broadcast-multiply-reduce, which XLA:CPU fuses into loops that read each cache
    slot once (as dots, the in-place-updated cache operand costs ~15% more at batch 32); for one row, as dots,
    which skip the reduction library's per-call overhead (~90 us a layer).
    """
    f32 = jnp.float32
    if q.shape[0] == 1:
        scores = jnp.einsum("bkgd,bkds->bkgs", q, kc.astype(q.dtype), preferred_element_type=f32)
    else:
        scores = (q[..., None].astype(f32) * kc[:, :, None].astype(f32)).sum(-2)
    scores = jnp.where(valid[:, None, None, :], scores * head_dim**-0.5, _NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(vc.dtype)
    if q.shape[0] == 1:
        return jnp.einsum("bkgs,bksd->bkgd", probs, vc).astype(q.dtype)
    return (probs[..., None] * vc[:, :, None, :, :]).sum(-2).astype(q.dtype)


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
):
    """One new token per row: writes its k/v at `slot` and returns (float32 logits [B, V], updated cache).

    Same arithmetic as `Transformer.__call__` with T = 1 (parity is tested against a full forward). head: the
    [E, V] output matrix from `head_matrix` (None: the model's own projection); kernels_t: the projections as
    [out, in] from `matvec_kernels` (None: the model's own kernels).
    """
    cfg = model.cfg
    b = tokens.shape[0]
    nh, kvh, g, d = cfg.num_heads, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim
    dt = cfg.jnp_dtype
    inv_freq, rope_scale = inv_frequencies(d, cfg.rope_theta, cfg.rope_scaling)
    table = constrain(model.embed_tokens.embedding[...], ("vocab", None))
    x = constrain(jnp.take(table, tokens, axis=0).astype(dt), ("batch", "embed"))
    slots = jnp.arange(cache.length, dtype=jnp.int32)
    valid = (slots[None, :] >= pad_len[:, None]) & (slots[None, :] <= slot)
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
        kc = jax.lax.dynamic_update_slice(cache.k[i], k.transpose(0, 2, 3, 1).astype(cache.k[i].dtype), (0, 0, 0, slot))
        vc = jax.lax.dynamic_update_slice(cache.v[i], v.transpose(0, 2, 1, 3).astype(cache.v[i].dtype), (0, 0, slot, 0))
        kc, vc = constrain(kc, K_AXES), constrain(vc, V_AXES)
        new_k.append(kc)
        new_v.append(vc)
        out = _attention(q.reshape(b, kvh, g, d), kc, vc, valid, d)
        x = x + _linears((attn.o_proj,), out.reshape(b, nh * d), kt.get("o"))[0]
        x = constrain(x + _mlp(layer.mlp, layer.post_attention_layernorm(x), kt), ("batch", "embed"))
    logits = logits_of(model, model.norm(x), head)
    return constrain(logits, ("batch", "vocab")), DecodeCache(k=new_k, v=new_v)


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
    model on it (writing cache slot prompt_slots + step). Returns (cache, state, tokens, logprobs, raw_logprobs),
    the last three [B, width] with -1 / 0 where a row had already finished.
    """
    b = state.logits.shape[0]
    out_tok = jnp.full((b, width), -1, jnp.int32)
    out_lp = jnp.zeros((b, width), jnp.float32)
    out_raw = jnp.zeros((b, width), jnp.float32)
    n_steps = jnp.minimum(n_steps, width)

    def cond(carry):
        i, _, st, *_ = carry
        return (i < n_steps) & ~jnp.all(st.done)

    def body(carry):
        i, cache, st, out_tok, out_lp, out_raw = carry
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
        logits, cache = forward_one(model, jnp.maximum(tok, 0), positions, cache, slot, consts.pad_len, head, kernels_t)
        st = DecodeState(
            logits=logits, generated=generated, step=st.step + 1, done=done, finish=finish, recent=recent, key=key
        )
        return i + 1, cache, st, out_tok, out_lp, out_raw

    carry = (jnp.int32(0), cache, state, out_tok, out_lp, out_raw)
    _, cache, state, out_tok, out_lp, out_raw = jax.lax.while_loop(cond, body, carry)
    return cache, state, out_tok, out_lp, out_raw
