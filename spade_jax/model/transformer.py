"""Flax NNX decoder-only transformer for the llama / qwen2 / qwen3 / qwen3-moe families, with an optional KV cache.

The model owns every way it runs: the full forward (training: remat and attention chunking set as
`ForwardOptions`), the cached forward (prefill) and the one-token step the sampler's decode loop calls
(`Transformer.decode`, with optional CPU-fast weight layouts), all over one cache layout (`kv_cache.py`).

Parameter names mirror the HF modules (`layers[i].attn.q_proj.kernel` <-> `model.layers.i.self_attn.q_proj`),
so import and export are a rename plus a transpose. Each parameter carries logical axis names in its
`logical_axes` metadata; `spade_jax.model.sharding` maps them onto a device mesh.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from spade_jax.model import kv_cache as kvc
from spade_jax.model.config import ModelConfig
from spade_jax.model.kv_cache import DecodeLayouts, KVCache
from spade_jax.model.moe import MoE
from spade_jax.model.rope import apply_rope, inv_frequencies
from spade_jax.model.sharding import constrain

__all__ = ["DecodeLayouts", "ForwardOptions", "KVCache", "Transformer"]

_NEG_INF = kvc.NEG_INF
REMAT_POLICIES = {
    "nothing": None,  # save only block inputs, recompute everything else
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,  # keep matmul outputs
}
MAX_UNROLLED_BLOCKS = 8  # `block_attention`: more blocks than this run as a loop ...
LOOP_BLOCK_ROWS = 512  # ... of blocks of at least this many query rows
REMAT_SCORE_BYTES = 64 * 2**20  # unrolled blocks keep their probabilities for the backward up to this (per layer)


class Linear(nnx.Linear):
    """nnx.Linear applied to the inputs flattened to 2-D [tokens, in].

    With [B, T, in] inputs XLA:CPU gives the weight gradient a transposed copy of the [B*T, out] activation
    gradient (a slow strided loop); flat, it is a plain matmul (the MLP backward ~20% faster). Elsewhere the
    reshape is free.
    """

    def __call__(self, inputs: jax.Array) -> jax.Array:
        if inputs.ndim <= 2:
            return super().__call__(inputs)
        out = super().__call__(inputs.reshape(-1, inputs.shape[-1]))
        return out.reshape(*inputs.shape[:-1], out.shape[-1])


def _linear(cfg: ModelConfig, din: int, dout: int, axes: tuple, rngs: nnx.Rngs, bias: bool = False) -> Linear:
    # bfloat16 weights with float32 compute: one bfloat16 matmul accumulating in float32 (the input rounded to
    # bfloat16), not an upcast copy of the weights on every call
    mixed = cfg.jnp_param_dtype == jnp.bfloat16 and cfg.jnp_dtype == jnp.float32
    return Linear(
        din,
        dout,
        use_bias=bias,
        dtype=cfg.jnp_dtype,
        param_dtype=cfg.jnp_param_dtype,
        promote_dtype=_promote_to_bf16_weights if mixed else nnx.nn.dtypes.promote_dtype,
        preferred_element_type=jnp.float32 if mixed else None,
        kernel_init=nnx.initializers.normal(0.02),
        kernel_metadata={"logical_axes": axes},
        bias_metadata={"logical_axes": axes[1:]},
        rngs=rngs,
    )


def _promote_to_bf16_weights(args: tuple, dtype=None, inexact: bool = True) -> tuple:
    """(inputs, kernel, bias) for a bfloat16-weight Linear: inputs rounded to the kernel's bfloat16, bias kept."""
    inputs, kernel, bias = args
    return inputs.astype(kernel.dtype), kernel, None if bias is None else bias.astype(dtype)


class RMSNorm(nnx.Module):
    """x / rms(x) * scale, statistics in float32 (as the HF reference does)."""

    def __init__(self, dim: int, eps: float, cfg: ModelConfig, axis: str = "norm"):
        self.scale = nnx.Param(jnp.ones((dim,), cfg.jnp_param_dtype), logical_axes=(axis,))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y.astype(x.dtype) * self.scale[...].astype(x.dtype)).astype(x.dtype)


class Attention(nnx.Module):
    """Grouped-query attention with RoPE, optional QKV bias (qwen2) and per-head q/k norm (qwen3)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        e, d = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.q_proj = _linear(cfg, e, cfg.num_heads * d, ("embed", "q_heads"), rngs, cfg.qkv_bias)
        self.k_proj = _linear(cfg, e, cfg.num_kv_heads * d, ("embed", "kv_heads"), rngs, cfg.qkv_bias)
        self.v_proj = _linear(cfg, e, cfg.num_kv_heads * d, ("embed", "kv_heads"), rngs, cfg.qkv_bias)
        self.o_proj = _linear(cfg, cfg.num_heads * d, e, ("q_heads", "embed"), rngs)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps, cfg, "head_dim")
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps, cfg, "head_dim")

    def _qkv(self, x: jax.Array, positions: jax.Array, kernel_t: jax.Array | None = None) -> tuple[jax.Array, ...]:
        """q [B, T, H, D] and k, v [B, T, K, D] of x [B, T, E] (or [B, E], one token: T = 1), normed (qwen3) and
        rotated to positions [B, T]."""
        cfg = self.cfg
        b, t = x.shape[0], x.shape[1] if x.ndim == 3 else 1
        q, k, v = kvc.linears((self.q_proj, self.k_proj, self.v_proj), x, kernel_t)
        q = q.reshape(b, t, cfg.num_heads, cfg.head_dim)
        k = k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        v = v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        # Frequencies are trace-time numpy constants (kept out of the module state so it holds only Params).
        inv_freq, rope_scale = inv_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        return apply_rope(q, positions, inv_freq, rope_scale), apply_rope(k, positions, inv_freq, rope_scale), v

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        mask: jax.Array,
        cache_kv: tuple[jax.Array, jax.Array] | None,
        cache_index: jax.Array | int,
        query_chunk: int = 0,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """x [B, T, E] -> (output [B, T, E], updated (keys, values) or None). Without a cache, `query_chunk`
        rows at a time (`block_attention`; 0: all at once)."""
        cfg = self.cfg
        b, t, _ = x.shape
        q, k, v = self._qkv(x, positions)
        q = q.reshape(b, t, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim)
        if cache_kv is not None:
            ck, cv = kvc.write(*cache_kv, k, v, cache_index)
            out, new_cache = cached_attention(q, ck, cv, mask), (ck, cv)
        elif blocks_apply(t, query_chunk):
            out, new_cache = block_attention(q, k, v, mask, query_chunk), None
        else:
            out, new_cache = attention(q, k, v, mask), None
        return self.o_proj(out.reshape(b, t, cfg.num_heads * cfg.head_dim)), new_cache

    def decode(
        self,
        x: jax.Array,
        positions: jax.Array,
        into: tuple[jax.Array, jax.Array],
        at,
        valid: jax.Array,
        prior: tuple[jax.Array, jax.Array, jax.Array] | None,
        kernels: dict[str, jax.Array],
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """One token per row, x [B, E] at positions [B]: its k/v are written at slot `at` of `into` (keys,
        values), whose slots attend where `valid` [B, S]; with `prior` (keys, values, valid), a read-only cache
        before them in the same softmax. Returns (output [B, E], updated `into`)."""
        cfg = self.cfg
        b, d, kvh = x.shape[0], cfg.head_dim, cfg.num_kv_heads
        q, k, v = self._qkv(x, positions[:, None], kernels.get("qkv"))
        kn, vn = kvc.write(*into, k, v, at)
        parts = [(kn, vn, valid)] if prior is None else [prior, (kn, vn, valid)]
        out = kvc.attend_one(q.reshape(b, kvh, cfg.num_heads // kvh, d), parts, d)
        return kvc.linears((self.o_proj,), out.reshape(b, cfg.num_heads * d), kernels.get("o"))[0], (kn, vn)


def scores_f32(spec: str, q: jax.Array, k: jax.Array) -> jax.Array:
    """`jnp.einsum(spec, q, k)` accumulating in float32. XLA:CPU has no bfloat16 x bfloat16 -> float32 dot for
    some operand layouts (it fails at run time: "Unsupported element type for DotThunk"), so on CPU bfloat16
    operands are widened first: the same values (a product of two bfloat16 numbers is exact in float32)."""
    if jax.default_backend() == "cpu" and q.dtype == jnp.bfloat16:
        q, k = q.astype(jnp.float32), k.astype(jnp.float32)
    return jnp.einsum(spec, q, k, preferred_element_type=jnp.float32)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """q [B, T, K, G, D] over k, v [B, S, K, D] where mask [B, T, S] allows -> [B, T, K, G, D]."""
    scores = scores_f32("btkgd,bskd->bkgts", q, k)
    scores = scores * (q.shape[-1] ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, _NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgts,bskd->btkgd", probs, v)


def cached_attention(q: jax.Array, keys: jax.Array, values: jax.Array, mask: jax.Array) -> jax.Array:
    """`attention` over a cache in its own layout: keys [B, K, D, S], values [B, K, S, D]."""
    keys, values = keys.astype(q.dtype), values.astype(q.dtype)
    scores = scores_f32("btkgd,bkds->bkgts", q, keys)
    scores = scores * (q.shape[-1] ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, _NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    return jnp.einsum("bkgts,bksd->btkgd", probs, values)


def blocks_apply(t: int, chunk: int) -> bool:
    """Whether `block_attention` splits T query rows (a chunk shorter than T; any T: the rows are padded)."""
    return 0 < chunk < t


def block_rows(t: int, chunk: int) -> int:
    """Query rows per block of `block_attention` for T rows: `chunk` when T needs at most MAX_UNROLLED_BLOCKS
    of them (unrolled), else the largest multiple of `chunk` up to max(chunk, LOOP_BLOCK_ROWS) that divides
    T padded to a multiple of `chunk` (looped); T itself when no split applies."""
    if not blocks_apply(t, chunk):
        return t
    n = -(-t // chunk)
    if n <= MAX_UNROLLED_BLOCKS:
        return chunk
    return chunk * max(k for k in range(1, max(1, LOOP_BLOCK_ROWS // chunk) + 1) if n % k == 0)


def block_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, chunk: int) -> jax.Array:
    """`attention` for a causal `mask`, `chunk` query rows at a time, so the whole score matrix never exists.
    Up to MAX_UNROLLED_BLOCKS blocks are unrolled and attend only to keys up to their end (the rest are masked
    anyway: about half the matrix is skipped); they keep their probabilities for the backward pass while these
    total at most REMAT_SCORE_BYTES, and are recomputed in it past that. Longer rows run recomputed blocks of
    `block_rows` over all keys in a loop, which bounds memory on every backend (XLA's CPU scheduler keeps
    unrolled blocks' buffers alive together). Rows are padded to a multiple of `chunk` with fully masked
    query rows, which are dropped from the output."""
    b, t, heads = q.shape[0], q.shape[1], q.shape[2] * q.shape[3]
    heads_major = lambda x: jnp.moveaxis(x, 1, -2)  # [B, T, ..., D] -> [B, ..., T, D]: batched matmul layout

    def block(qb: jax.Array, kb: jax.Array, vb: jax.Array, mb: jax.Array) -> jax.Array:
        scores = scores_f32("bkgtd,bksd->bkgts", qb, kb)
        scores = jnp.where(mb[:, None, None], scores, _NEG_INF)
        probs = jax.nn.softmax(scores, axis=-1).astype(vb.dtype)
        return jnp.einsum("bkgts,bksd->bkgtd", probs, vb)

    qh, kh, vh = heads_major(q * q.shape[-1] ** -0.5), heads_major(k), heads_major(v)  # scale the smaller side
    tp = -(-t // chunk) * chunk
    if tp > t:  # padded query rows attend to nothing (uniform over masked keys) and are sliced off below
        qh = jnp.pad(qh, [(0, 0)] * (qh.ndim - 2) + [(0, tp - t), (0, 0)])
        mask = jnp.pad(mask, [(0, 0), (0, tp - t), (0, 0)])
    rows = block_rows(t, chunk)
    if rows == chunk and tp // chunk <= MAX_UNROLLED_BLOCKS:
        unrolled_bytes = 4 * b * heads * chunk * sum(min(s + chunk, t) for s in range(0, tp, chunk))
        block = block if unrolled_bytes <= REMAT_SCORE_BYTES else jax.checkpoint(block)
        outs = [block(qh[..., s : s + chunk, :], kh[..., : s + chunk, :], vh[..., : s + chunk, :],
                      mask[:, s : s + chunk, : s + chunk]) for s in range(0, tp, chunk)]  # fmt: skip
        return jnp.moveaxis(jnp.concatenate(outs, axis=-2)[..., :t, :], -2, 1)
    block = jax.checkpoint(block)  # a loop would otherwise stack every block's probabilities
    n = tp // rows
    qs = jnp.moveaxis(qh.reshape(*qh.shape[:-2], n, rows, qh.shape[-1]), -3, 0)  # [n, B, K, G, rows, D]
    ms = jnp.moveaxis(mask.reshape(mask.shape[0], n, rows, t), 1, 0)
    out = jax.lax.map(lambda qm: block(qm[0], kh, vh, qm[1]), (qs, ms))
    return jnp.moveaxis(jnp.moveaxis(out, 0, -3).reshape(qh.shape)[..., :t, :], -2, 1)


class MLP(nnx.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        e, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = _linear(cfg, e, f, ("embed", "mlp"), rngs)
        self.up_proj = _linear(cfg, e, f, ("embed", "mlp"), rngs)
        self.down_proj = _linear(cfg, f, e, ("mlp", "embed"), rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))

    def decode(self, x: jax.Array, kernels: dict[str, jax.Array]) -> jax.Array:
        """The same function, from `DecodeLayouts` kernels where given."""
        gate, up = kvc.linears((self.gate_proj, self.up_proj), x, kernels.get("gate_up"))
        return kvc.linears((self.down_proj,), jax.nn.silu(gate) * up, kernels.get("down"))[0]


class Block(nnx.Module):
    """Pre-norm residual block: attention then MLP (a sparse MoE on the config's MoE layers)."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, layer_idx: int = 0):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        self.attn = Attention(cfg, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        self.mlp = MoE(cfg, rngs) if cfg.is_moe_layer(layer_idx) else MLP(cfg, rngs)

    def __call__(self, x, positions, mask, cache_kv, cache_index, query_chunk: int = 0):
        h, new_cache = self.attn(self.input_layernorm(x), positions, mask, cache_kv, cache_index, query_chunk)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), new_cache

    def decode(self, x, positions, into, at, valid, prior, kernels):
        """One token per row through the block (`Attention.decode`): (x [B, E], updated `into`)."""
        h, into = self.attn.decode(self.input_layernorm(x), positions, into, at, valid, prior, kernels)
        x = x + h
        h = self.post_attention_layernorm(x)
        x = x + (self.mlp.decode(h, kernels) if isinstance(self.mlp, MLP) else self.mlp(h))
        return constrain(x, ("batch", "embed")), into

    def decode_kernels(self) -> dict[str, jax.Array]:
        """This block's projections as [out, in] matrices (`DecodeLayouts.kernels`; MoE experts keep theirs)."""
        a = self.attn
        out = {"qkv": kvc.stacked_t(a.q_proj, a.k_proj, a.v_proj), "o": kvc.stacked_t(a.o_proj)}
        if isinstance(self.mlp, MLP):
            m = self.mlp
            out.update(gate_up=kvc.stacked_t(m.gate_proj, m.up_proj), down=kvc.stacked_t(m.down_proj))
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForwardOptions:
    """How the forward without a cache (training) runs: `remat` recomputes each block in the backward pass
    (saving what `remat_policy` names, of REMAT_POLICIES); `query_chunk` query rows per causal attention block
    (0: all at once). Values are unchanged; memory and time are not."""

    remat: bool = False
    remat_policy: str = "nothing"
    query_chunk: int = 0

    def __post_init__(self):
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"remat_policy={self.remat_policy!r}; expected one of {tuple(REMAT_POLICIES)}")
        if self.query_chunk < 0:
            raise ValueError(f"query_chunk={self.query_chunk} must be >= 0")


class Transformer(nnx.Module):
    """Token ids -> float32 logits, optionally reading and writing a KV cache."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed_tokens = nnx.Embed(
            cfg.vocab_size,
            cfg.hidden_size,
            dtype=cfg.jnp_dtype,
            param_dtype=cfg.jnp_param_dtype,
            embedding_init=nnx.initializers.normal(0.02),
            embedding_metadata={"logical_axes": ("vocab", "embed")},
            rngs=rngs,
        )
        self.layers = nnx.List([Block(cfg, rngs, i) for i in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        if not cfg.tie_embeddings:
            self.lm_head = _linear(cfg, cfg.hidden_size, cfg.vocab_size, ("embed", "vocab"), rngs)
        self.options = ForwardOptions()

    def set_options(self, options: ForwardOptions) -> None:
        """Sets how the forward without a cache runs (remat, attention chunking): the learner's choice. Static
        module data, so jitted functions see a new graph (set it on the copy a traced function merges)."""
        self.options = options

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array | None = None,
        *,
        cache: KVCache | None = None,
        cache_index: jax.Array | int = 0,
        attn_mask: jax.Array | None = None,
        return_hidden: bool = False,
    ) -> tuple[jax.Array, KVCache | None]:
        """Runs T new tokens per row.

        tokens, positions: int32 [B, T]. With `cache`, the new keys/values are written at slots
        [cache_index, cache_index + T) of every row and attention spans all S cache slots; without it,
        attention spans the T tokens. attn_mask: bool [B, T, S] (or [B, T, T]), True = may attend;
        defaults to causal over slots. Returns (logits float32 [B, T, V] or the final hidden states when
        return_hidden, the updated cache or None).
        """
        b, t = tokens.shape
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32) + cache_index, (b, t))
        if attn_mask is None:
            s = cache.length if cache is not None else t
            q_slot = jnp.arange(t)[:, None] + cache_index
            attn_mask = jnp.broadcast_to(jnp.arange(s)[None, :] <= q_slot, (b, t, s))
        residual = ("batch", "length", "embed")  # activation sharding; no-op without a mesh
        # FSDP: gather the table over its embed shards before the lookup (vocab stays split); no-op without a mesh.
        table = constrain(self.embed_tokens.embedding[...].astype(self.cfg.jnp_dtype), ("vocab", None))
        x = constrain(jnp.take(table, tokens, axis=0), residual)
        opts = self.options if cache is None else ForwardOptions()
        run = lambda blk, h, pos, m: blk(h, pos, m, None, 0, opts.query_chunk)[0]
        remat = nnx.remat(run, policy=REMAT_POLICIES[opts.remat_policy]) if opts.remat else None
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            if remat is not None:
                x, kv = remat(layer, x, positions, attn_mask), None
            else:
                cache_kv = (cache.k[i], cache.v[i]) if cache is not None else None
                x, kv = layer(x, positions, attn_mask, cache_kv, cache_index, opts.query_chunk)
            x = constrain(x, residual)
            if kv is not None:
                new_k.append(kv[0])
                new_v.append(kv[1])
        x = self.norm(x)
        new_cache = KVCache(k=new_k, v=new_v) if cache is not None else None
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def decode(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        cache: KVCache,
        slot,
        pad_len: jax.Array,
        *,
        layouts: DecodeLayouts | None = None,
        chunk: KVCache | None = None,
        chunk_index=None,
    ) -> tuple[jax.Array, KVCache]:
        """One new token per row (tokens, positions int32 [B]) at cache slot `slot`: (float32 logits [B, V],
        updated cache). Same values as `__call__` with T = 1 (tested against a full forward).

        Rows are left-padded: slots before pad_len [B] are never attended. With `chunk` (the keys/values of
        the current decode chunk, slot `chunk_index` of it being `slot`), the cache is only read, for slots
        before the chunk; the new k/v goes into the chunk, and the updated chunk is returned instead of the
        cache (a cache written and read by the same step was copied whole every step on XLA:CPU).
        """
        cfg = self.cfg
        layouts = layouts or DecodeLayouts()
        table = constrain(self.embed_tokens.embedding[...], ("vocab", None))
        x = constrain(jnp.take(table, tokens, axis=0).astype(cfg.jnp_dtype), ("batch", "embed"))
        slots = jnp.arange(cache.length, dtype=jnp.int32)
        first = slot + 1 if chunk is None else slot - chunk_index  # the cache slots before `first` are attended
        valid = (slots[None, :] >= pad_len[:, None]) & (slots[None, :] < first)
        if chunk is None:
            into, at, own = cache, slot, valid
        else:
            into, at = chunk, chunk_index
            own = jnp.arange(chunk.length, dtype=jnp.int32) <= chunk_index
            own = jnp.broadcast_to(own[None, :], (tokens.shape[0], chunk.length))
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            prior = None if chunk is None else (cache.k[i], cache.v[i], valid)
            kernels = layouts.kernels[i] if layouts.kernels is not None else {}
            x, (k, v) = layer.decode(x, positions, (into.k[i], into.v[i]), at, own, prior, kernels)
            new_k.append(k)
            new_v.append(v)
        logits = self.logits(self.norm(x), head=layouts.head)
        return constrain(logits, ("batch", "vocab")), KVCache(k=new_k, v=new_v)

    def decode_layouts(self, *, head: bool = False, kernels: bool = False) -> DecodeLayouts:
        """CPU-fast weight copies for `decode` (see `DecodeLayouts`): the tied head as [E, V] (None when untied),
        the projections as [out, in]. Made on device; they must be remade after a weight update."""
        tied_head = head and self.cfg.tie_embeddings
        return DecodeLayouts(
            head=constrain(self.embed_tokens.embedding[...].T, (None, "vocab")) if tied_head else None,
            kernels=[layer.decode_kernels() for layer in self.layers] if kernels else None,
        )

    def logits(self, hidden: jax.Array, *, head: jax.Array | None = None) -> jax.Array:
        """Projects final hidden states [..., E] to float32 logits [..., V] (through `head` [E, V], the tied
        embedding transposed, when given: same values)."""
        if head is not None:
            if head.dtype == jnp.bfloat16:
                return jnp.dot(hidden.astype(head.dtype), head, preferred_element_type=jnp.float32)
            return jnp.dot(hidden, head.astype(hidden.dtype), preferred_element_type=jnp.float32)
        if self.cfg.tie_embeddings:
            w = self.embed_tokens.embedding[...]
            if w.dtype == jnp.bfloat16:  # as the Linears: a bfloat16 matmul accumulating in float32
                hidden = hidden.astype(w.dtype)
            flat = hidden.reshape(-1, hidden.shape[-1])  # 2-D, as in `Linear`
            logits = jnp.einsum("te,ve->tv", flat, w.astype(hidden.dtype), preferred_element_type=jnp.float32)
            logits = logits.reshape(*hidden.shape[:-1], logits.shape[-1])
        else:
            logits = self.lm_head(hidden).astype(jnp.float32)
        if logits.ndim == 3:
            logits = constrain(logits, ("batch", "length", "vocab"))
        return logits
