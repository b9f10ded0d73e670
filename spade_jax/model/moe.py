"""Qwen3-MoE sparse feed-forward: a float32-softmax top-k router and SwiGLU experts stored as stacked weights.

Routing is dropless, as in the HF reference: every token reaches all of its top-k experts (no capacity limit).
The (token, expert) pairs are sorted by expert and the experts run as one grouped matmul (`jax.lax.ragged_dot`),
so the cost is that of the routed tokens only and there is no Python loop over experts. When the active mesh has
an "expert" axis larger than 1, the experts are split over it (expert parallelism): every shard gathers the
routed tokens, runs its own experts, and the partial outputs are summed over the axis.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from spade_jax.model.config import ModelConfig

EXPERT_AXIS = "expert"  # mesh axis the experts are split over (see spade_jax.model.sharding)


def route(logits: jax.Array, top_k: int, norm_topk_prob: bool) -> tuple[jax.Array, jax.Array]:
    """Router logits [N, E] -> (weights [N, k] in the logits' dtype, expert ids int32 [N, k]).

    Softmax over all experts in float32, then the k largest; renormalised to sum to 1 when norm_topk_prob.
    """
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    weights, ids = jax.lax.top_k(probs, top_k)
    if norm_topk_prob:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return weights.astype(logits.dtype), ids.astype(jnp.int32)


def _swiglu_grouped(xs: jax.Array, sizes: jax.Array, gate: jax.Array, up: jax.Array, down: jax.Array) -> jax.Array:
    """Rows of xs [M, H] sorted by group, group g of sizes[g] rows through expert g: down(silu(gate x) * up x).

    Rows past sum(sizes) come out as zeros.
    """
    h = jax.nn.silu(jax.lax.ragged_dot(xs, gate, sizes)) * jax.lax.ragged_dot(xs, up, sizes)
    return jax.lax.ragged_dot(h.astype(xs.dtype), down, sizes)


def _expert_parallel(
    xs: jax.Array, sizes: jax.Array, gate: jax.Array, up: jax.Array, down: jax.Array, mesh, n_shards: int
) -> jax.Array:
    """`_swiglu_grouped` with the experts split over the mesh's expert axis (each shard holds E / n of them).

    Every shard sees all sorted rows, rotates its own experts' contiguous block of rows to the front, runs a
    grouped matmul over its local experts (other rows give zeros), rotates back, and the shards' outputs are
    summed. Other mesh axes stay automatic (their sharding of the weights is kept by XLA).
    """

    def local(xs, sizes, gate, up, down):
        shard = jax.lax.axis_index(EXPERT_AXIS)
        n_local = gate.shape[0]
        local_sizes = jax.lax.dynamic_slice_in_dim(sizes, shard * n_local, n_local)
        start = jnp.sum(jnp.where(jnp.arange(sizes.shape[0]) < shard * n_local, sizes, 0))
        out = _swiglu_grouped(jnp.roll(xs, -start, axis=0), local_sizes, gate, up, down)
        return jax.lax.psum(jnp.roll(out, start, axis=0), EXPERT_AXIS)

    w = P(EXPERT_AXIS)
    fn = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P(), w, w, w),
        out_specs=P(),
        axis_names={EXPERT_AXIS},
        check_vma=False,
    )
    return fn(xs, sizes, gate, up, down)


def _expert_shards(num_experts: int):
    """(mesh, size of its expert axis) under the current `jax.set_mesh`, or (None, 1) when no split applies."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or EXPERT_AXIS not in mesh.axis_names:
        return None, 1
    n = dict(mesh.shape)[EXPERT_AXIS]
    if n == 1 or num_experts % n:
        return None, 1
    return mesh, n


class Experts(nnx.Module):
    """E SwiGLU experts as stacked kernels: gate_proj / up_proj [E, hidden, moe_inter], down_proj [E, moe_inter,
    hidden] (logical axes ("expert", "embed", "mlp") / ("expert", "mlp", "embed"))."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        e, h, f = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        init = nnx.initializers.normal(0.02)
        dt = cfg.jnp_param_dtype
        self.gate_proj = nnx.Param(init(rngs.params(), (e, h, f), dt), logical_axes=("expert", "embed", "mlp"))
        self.up_proj = nnx.Param(init(rngs.params(), (e, h, f), dt), logical_axes=("expert", "embed", "mlp"))
        self.down_proj = nnx.Param(init(rngs.params(), (e, f, h), dt), logical_axes=("expert", "mlp", "embed"))
        self.dtype = cfg.jnp_dtype

    def __call__(self, xs: jax.Array, sizes: jax.Array) -> jax.Array:
        """Rows [M, hidden] sorted by expert, sizes int32 [E] -> expert outputs [M, hidden] (same row order)."""
        gate, up, down = (p[...].astype(self.dtype) for p in (self.gate_proj, self.up_proj, self.down_proj))
        mesh, n = _expert_shards(gate.shape[0])
        if mesh is None:
            return _swiglu_grouped(xs, sizes, gate, up, down)
        return _expert_parallel(xs, sizes, gate, up, down, mesh, n)


class MoE(nnx.Module):
    """Qwen3-MoE sparse block: `gate` (router, no bias) picks top-k of `experts` per token; their outputs are
    summed with the router weights. Accepts any leading shape: [B, T, hidden] or [B, hidden]."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.gate = nnx.Linear(
            cfg.hidden_size,
            cfg.num_experts,
            use_bias=False,
            dtype=cfg.jnp_dtype,
            param_dtype=cfg.jnp_param_dtype,
            kernel_init=nnx.initializers.normal(0.02),
            kernel_metadata={"logical_axes": ("embed", None)},
            rngs=rngs,
        )
        self.experts = Experts(cfg, rngs)
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.norm_topk_prob

    def __call__(self, x: jax.Array) -> jax.Array:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        n, k = x.shape[0], self.top_k
        weights, ids = route(self.gate(x), k, self.norm_topk_prob)
        flat = ids.reshape(-1)  # [N * k], pair p belongs to token p // k
        order = jnp.argsort(flat, stable=True)
        sizes = jnp.bincount(flat, length=self.experts.gate_proj.shape[0]).astype(jnp.int32)
        out = self.experts(jnp.take(x, order // k, axis=0), sizes)  # [N * k, hidden], sorted by expert
        out = jnp.take(out, jnp.argsort(order), axis=0).reshape(n, k, -1)  # back to (token, slot) order
        y = jnp.einsum("nkh,nk->nh", out, weights.astype(out.dtype))
        return y.astype(x.dtype).reshape(shape)
