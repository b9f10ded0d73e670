"""Flax NNX decoder-only transformer for the llama / qwen2 / qwen3 / qwen3-moe families, with an optional KV cache.

The model owns every way it runs: the full forward (training: packed rows by segment ids, remat and attention
set as `ForwardOptions`, attention in `train_attention.py`), the cached forward (prefill) and the one-token step
the sampler's decode loop calls (`Transformer.decode`, with optional CPU-fast weight layouts), all over one cache
layout (`kv_cache.py`).

Blocks are stacked when the config allows (`ModelConfig.scanned`, the default): `layers` is then one `Block`
whose parameters carry a leading [num_layers] axis (logical axis "layers"), and the forward without a cache is
one `jax.lax.scan` over it, so its program holds one block whatever the depth (compile time stops growing with
it). The cached forward and decoding run the blocks one by one, from per-layer views (`Transformer.blocks`);
on XLA:CPU decoding reads per-layer copies made once per weight update (`DecodeLayouts.layers`), since a slice
of a stacked weight is copied on every step there.

Parameter names mirror the HF modules (`layers.attn.q_proj.kernel` [L, E, H*D] <-> `model.layers.{i}.self_attn.
q_proj.weight`; unstacked `layers.i.attn.q_proj.kernel`), so import and export are a rename, a transpose and a
slice (`hf_io.py`); `layer_stack.py` converts between the two layouts (old checkpoints). Each parameter carries
logical axis names in its `logical_axes` metadata; `spade_jax.model.sharding` maps them onto a device mesh.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from spade_jax.model import decode_attention, train_attention
from spade_jax.model import kv_cache as kvc
from spade_jax.model.config import ModelConfig
from spade_jax.model.kv_cache import DecodeLayouts, KVCache
from spade_jax.model.moe import MoE
from spade_jax.model.rope import apply_rope, inv_frequencies
from spade_jax.model.sharding import constrain
from spade_jax.model.train_attention import attention, scores_f32

__all__ = ["DecodeLayouts", "ForwardOptions", "KVCache", "Transformer", "attention", "scores_f32"]

_NEG_INF = kvc.NEG_INF
# What a rematerialised block keeps for its backward pass (the rest is recomputed), by `checkpoint_name`:
# "attn" the q, k, v, o projections and the attention kernel's output and log-sum-exp (H*D + 2*K*D + E + H*D + H
# values per token: the attention is not run again), "mlp" gate, up and down (2*F + E), "dots" both.
# benchmarks/plan_memory.py says which fits; benchmarks/kernels_learner.py what each costs in FLOPs.
_ATTN_NAMES = ("attn_proj", train_attention.RESIDUAL_NAME)
REMAT_POLICIES = {
    "nothing": None,  # save only block inputs, recompute everything else
    "attn": jax.checkpoint_policies.save_only_these_names(*_ATTN_NAMES),
    "mlp": jax.checkpoint_policies.save_only_these_names("mlp_proj"),
    "dots": jax.checkpoint_policies.save_only_these_names(*_ATTN_NAMES, "mlp_proj"),
}
_name = checkpoint_name


class Linear(nnx.Linear):
    """nnx.Linear applied to the inputs flattened to 2-D [tokens, in].

    With [B, T, in] inputs XLA:CPU gives the weight gradient a transposed copy of the [B*T, out] activation
    gradient (a slow strided loop); flat, it is a plain matmul (the MLP backward ~20% faster). Elsewhere the
    reshape is free.
    """

    def __call__(self, inputs: jax.Array) -> jax.Array:
        flat = inputs if inputs.ndim <= 2 else inputs.reshape(-1, inputs.shape[-1])
        out = super().__call__(flat).astype(self.dtype)  # accumulated in float32 (bfloat16 weights), then rounded
        return out if inputs.ndim <= 2 else out.reshape(*inputs.shape[:-1], out.shape[-1])


def _linear(cfg: ModelConfig, din: int, dout: int, axes: tuple, rngs: nnx.Rngs, bias: bool = False) -> Linear:
    # bfloat16 weights: one bfloat16 matmul accumulating in float32 (a float32 input rounded to bfloat16), its sum
    # rounded to the compute dtype once; never an upcast copy of the weights (XLA:CPU upcast bfloat16 x bfloat16
    # -> bfloat16 dots and hoisted float32 copies of every weight out of the decode loop)
    mixed = cfg.jnp_param_dtype == jnp.bfloat16
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
        q, k, v = (_name(y, "attn_proj") for y in kvc.linears((self.q_proj, self.k_proj, self.v_proj), x, kernel_t))
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
        mask: jax.Array | None,
        cache_kv: tuple[jax.Array, jax.Array] | None,
        cache_index: jax.Array | int,
        options: ForwardOptions | None = None,
        segment_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """x [B, T, E] -> (output [B, T, E], updated (keys, values) or None). With a cache, attention follows
        `mask` [B, T, S] over its slots; without one, it is causal within `segment_ids` [B, T] (None: one
        segment per row), run as `options` say (`train_attention.causal_attention`)."""
        cfg = self.cfg
        b, t, _ = x.shape
        q, k, v = self._qkv(x, positions)
        q = q.reshape(b, t, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim)
        if cache_kv is not None:
            ck, cv = kvc.write(*cache_kv, k, v, cache_index)
            out, new_cache = cached_attention(q, ck, cv, mask), (ck, cv)
        else:
            opts = options or ForwardOptions()
            out = train_attention.causal_attention(q, k, v, segment_ids, impl=opts.attention, chunk=opts.query_chunk)
            new_cache = None
        return _name(self.o_proj(out.reshape(b, t, cfg.num_heads * cfg.head_dim)), "attn_proj"), new_cache

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
        out = decode_attention.attend(q.reshape(b, kvh, cfg.num_heads // kvh, d), parts, d)
        return kvc.linears((self.o_proj,), out.reshape(b, cfg.num_heads * d), kernels.get("o"))[0], (kn, vn)


def cached_attention(q: jax.Array, keys: jax.Array, values: jax.Array, mask: jax.Array) -> jax.Array:
    """`attention` over a cache in its own layout: keys [B, K, D, S], values [B, K, S, D]."""
    keys, values = keys.astype(q.dtype), values.astype(q.dtype)
    scores = scores_f32("btkgd,bkds->bkgts", q, keys)
    scores = scores * (q.shape[-1] ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, _NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    return jnp.einsum("bkgts,bksd->btkgd", probs, values)


class MLP(nnx.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        e, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = _linear(cfg, e, f, ("embed", "mlp"), rngs)
        self.up_proj = _linear(cfg, e, f, ("embed", "mlp"), rngs)
        self.down_proj = _linear(cfg, f, e, ("mlp", "embed"), rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        gate, up = _name(self.gate_proj(x), "mlp_proj"), _name(self.up_proj(x), "mlp_proj")
        return _name(self.down_proj(jax.nn.silu(gate) * up), "mlp_proj")

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

    def __call__(self, x, positions, mask, cache_kv, cache_index, options=None, segment_ids=None):
        """(x [B, T, E] through the block, updated cache layer or None): `Attention.__call__`'s arguments."""
        h, new_cache = self.attn(self.input_layernorm(x), positions, mask, cache_kv, cache_index, options, segment_ids)
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
    (saving what `remat_policy` names, of REMAT_POLICIES); `query_chunk` query rows (and keys) per block of the
    "xla" causal attention (0: the whole score matrix); `attention` the implementation (`train_attention.IMPLS`:
    "auto" picks cuDNN on GPU, splash on TPU, the XLA blocks elsewhere). Values are unchanged up to float
    rounding; memory and time are not."""

    remat: bool = False
    remat_policy: str = "nothing"
    query_chunk: int = 0
    attention: str = "auto"

    def __post_init__(self):
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"remat_policy={self.remat_policy!r}; expected one of {tuple(REMAT_POLICIES)}")
        if self.query_chunk < 0:
            raise ValueError(f"query_chunk={self.query_chunk} must be >= 0")
        if self.attention not in train_attention.IMPLS:
            raise ValueError(f"attention={self.attention!r}; expected one of {train_attention.IMPLS}")


def stacked_blocks(cfg: ModelConfig, rngs: nnx.Rngs) -> Block:
    """The model's blocks as one Block whose parameters have a leading [num_layers] axis (logical axis "layers").

    The blocks are made one by one from `rngs`, exactly as the unstacked model makes them, then stacked: a seed
    gives the same weights in both layouts (the tests compare them directly)."""
    blocks = [Block(cfg, rngs, i) for i in range(cfg.num_layers)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[nnx.state(b) for b in blocks])
    out = blocks[0]
    nnx.update(out, stacked)
    for _, node in nnx.iter_graph(out):
        if isinstance(node, nnx.Variable) and node.get_metadata().get("logical_axes") is not None:
            node.set_metadata(logical_axes=("layers", *node.get_metadata()["logical_axes"]))
    return out


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
        if cfg.scanned:
            self.layers = stacked_blocks(cfg, rngs)
        else:
            self.layers = nnx.List([Block(cfg, rngs, i) for i in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        if not cfg.tie_embeddings:
            self.lm_head = _linear(cfg, cfg.hidden_size, cfg.vocab_size, ("embed", "vocab"), rngs)
        self.options = ForwardOptions()

    def set_options(self, options: ForwardOptions) -> None:
        """Sets how the forward without a cache runs (remat, attention): the learner's choice. Static module
        data, so jitted functions see a new graph (set it on the copy a traced function merges)."""
        self.options = options

    @property
    def scanned(self) -> bool:
        """Whether `layers` is one stacked Block (see the module doc) rather than a list of them."""
        return not isinstance(self.layers, nnx.List)

    def blocks(self, layouts: DecodeLayouts | None = None) -> list[Block]:
        """The blocks as modules, one per layer: the model's own when unstacked; else `layouts.layers`'
        per-layer copies when given, or views of the stacked parameters' slices (inside jit, on XLA:CPU a
        slice is a copy of the weights each time the program runs)."""
        if not self.scanned:
            return list(self.layers)
        graphdef, state = nnx.split(self.layers)
        if layouts is not None and layouts.layers is not None:
            return [nnx.merge(graphdef, st) for st in layouts.layers]
        return [nnx.merge(graphdef, jax.tree.map(lambda x, i=i: x[i], state)) for i in range(self.cfg.num_layers)]

    def layer(self, i: int) -> Block:
        """Block i as a module (for the stacked layout, a view of slice i: read it, do not update it)."""
        return self.layers[i] if not self.scanned else self.blocks()[i]

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array | None = None,
        *,
        cache: KVCache | None = None,
        cache_index: jax.Array | int = 0,
        attn_mask: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
        return_hidden: bool = False,
    ) -> tuple[jax.Array, KVCache | None]:
        """Runs T new tokens per row.

        tokens, positions: int32 [B, T]. With `cache`, the new keys/values are written at slots
        [cache_index, cache_index + T) of every row and attention spans all S cache slots where attn_mask
        (bool [B, T, S], True = may attend; default: causal over slots) allows. Without it, attention is causal
        over the T tokens within `segment_ids` (int [B, T], packed rows: 1, 2, ... per sample, 0 on padding;
        default: one segment), run as `self.options` say. Returns (logits float32 [B, T, V] or the final hidden
        states when return_hidden, the updated cache or None).
        """
        b, t = tokens.shape
        if cache is None and attn_mask is not None:
            raise ValueError("attn_mask is for the forward with a cache; without one, pass segment_ids")
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32) + cache_index, (b, t))
        if cache is not None and attn_mask is None:
            q_slot = jnp.arange(t)[:, None] + cache_index
            attn_mask = jnp.broadcast_to(jnp.arange(cache.length)[None, :] <= q_slot, (b, t, cache.length))
        residual = ("batch", "length", "embed")  # activation sharding; no-op without a mesh
        # FSDP: gather the table over its embed shards before the lookup (vocab stays split); no-op without a mesh.
        table = constrain(self.embed_tokens.embedding[...].astype(self.cfg.jnp_dtype), ("vocab", None))
        x = constrain(jnp.take(table, tokens, axis=0), residual)
        new_cache = None
        if cache is None:
            x = self._blocks_forward(x, positions, segment_ids)
        else:
            new_k, new_v = [], []
            for i, layer in enumerate(self.blocks()):
                x, (k, v) = layer(x, positions, attn_mask, (cache.k[i], cache.v[i]), cache_index)
                x = constrain(x, residual)
                new_k.append(k)
                new_v.append(v)
            new_cache = KVCache(k=new_k, v=new_v)
        x = self.norm(x)
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def _blocks_forward(self, x: jax.Array, positions: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
        """Hidden states [B, T, E] through every block without a cache, as `self.options` say: one scan over the
        stacked blocks (or a loop over the unstacked ones), each block under `jax.checkpoint` with the remat
        policy when remat is on."""
        opts = self.options
        residual = ("batch", "length", "embed")

        def run(layer: Block, h: jax.Array) -> jax.Array:
            return constrain(layer(h, positions, None, None, 0, opts, segment_ids)[0], residual)

        policy = REMAT_POLICIES[opts.remat_policy]
        if not self.scanned:
            step = nnx.remat(run, policy=policy) if opts.remat else run
            for layer in self.layers:
                x = step(layer, x)
            return x
        graphdef, state = nnx.split(self.layers)
        body = lambda h, st: run(nnx.merge(graphdef, st), h)
        if opts.remat:  # prevent_cse=False: a scan body needs no CSE barrier (jax.checkpoint's own advice)
            body = jax.checkpoint(body, policy=policy, prevent_cse=False)
        x, _ = jax.lax.scan(lambda h, st: (body(h, st), None), x, state)
        return x

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
        x = constrain(kvc.take_rows(table, tokens).astype(cfg.jnp_dtype), ("batch", "embed"))
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
        for i, layer in enumerate(self.blocks(layouts)):
            prior = None if chunk is None else (cache.k[i], cache.v[i], valid)
            kernels = layouts.kernels[i] if layouts.kernels is not None else {}
            x, (k, v) = layer.decode(x, positions, (into.k[i], into.v[i]), at, own, prior, kernels)
            new_k.append(k)
            new_v.append(v)
        logits = self.logits(self.norm(x), head=layouts.head)
        return constrain(logits, ("batch", "vocab")), KVCache(k=new_k, v=new_v)

    def decode_layouts(self, *, head: bool = False, kernels: bool = False, layers: bool = False) -> DecodeLayouts:
        """CPU-fast weight copies for `decode` (see `DecodeLayouts`): the tied head as [E, V] (None when untied),
        the projections as [out, in], and a stacked model's blocks as per-layer copies (None when unstacked).
        Made on device; they must be remade after a weight update."""
        tied_head = head and self.cfg.tie_embeddings
        per_layer = None
        if layers and self.scanned:
            per_layer = [nnx.state(block) for block in self.blocks()]
        return DecodeLayouts(
            head=constrain(self.embed_tokens.embedding[...].T, (None, "vocab")) if tied_head else None,
            kernels=[layer.decode_kernels() for layer in self.blocks()] if kernels else None,
            layers=per_layer,
        )

    def head(self) -> tuple[jax.Array, int]:
        """The output projection and its vocabulary axis: the tied embedding [V, E] (0) or the head's kernel
        [E, V] (1); `logits` is hidden @ it (what `rl.losses.vocab_logprobs` walks in chunks)."""
        if self.cfg.tie_embeddings:
            return self.embed_tokens.embedding[...], 0
        return self.lm_head.kernel[...], 1

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
