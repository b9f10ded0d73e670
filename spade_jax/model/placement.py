"""Placing a model on a device mesh: parameters created directly in their shardings, moved onto a mesh, a sharded
forward, the KV cache's shardings, and a whole copy on this host's devices (multi-host sampling). The rules
themselves (which mesh axes a named dimension uses) are `sharding.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from spade_jax.model.config import ModelConfig
from spade_jax.model.kv_cache import K_AXES, V_AXES, KVCache
from spade_jax.model.sharding import DEFAULT_RULES, ShardingRules, activation_sharding, param_shardings, use_rules
from spade_jax.model.transformer import Transformer

__all__ = ["create_sharded", "kv_cache_shardings", "local_replica", "shard_model", "sharded_forward"]


def kv_cache_shardings(
    mesh: Mesh, cfg: ModelConfig, batch: int, length: int, rules: ShardingRules | None = None
) -> KVCache:
    """Shardings for a `KVCache` of this size (a KVCache whose leaves are NamedShardings)."""
    kvh, d = cfg.num_kv_heads, cfg.head_dim
    k = activation_sharding(mesh, K_AXES, (batch, kvh, d, length), rules)
    v = activation_sharding(mesh, V_AXES, (batch, kvh, length, d), rules)
    return KVCache(k=[k] * cfg.num_layers, v=[v] * cfg.num_layers)


def create_sharded(cfg: ModelConfig, mesh: Mesh, rngs_seed: int = 0, rules: ShardingRules | None = None) -> Transformer:
    """A randomly initialised Transformer whose parameters are created directly in their shardings.

    The initialiser is jitted with `out_shardings`, so no device ever holds the full unsharded model.
    """
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, abstract_state = nnx.split(abstract)
    shardings = param_shardings(abstract_state, mesh, rules)

    @jax.jit(out_shardings=shardings)
    def init(key: jax.Array) -> Any:
        return nnx.state(Transformer(cfg, rngs=nnx.Rngs(key)))

    with jax.set_mesh(mesh), use_rules(rules or DEFAULT_RULES):
        state = init(jax.random.key(rngs_seed))
    return nnx.merge(graphdef, state)


def shard_model(model: nnx.Module, mesh: Mesh, rules: ShardingRules | None = None) -> nnx.Module:
    """Moves the model's parameters onto the mesh as the rules say (in place; returns the model)."""
    state = nnx.state(model)
    nnx.update(model, jax.device_put(state, param_shardings(state, mesh, rules)))
    return model


def sharded_forward(
    model: nnx.Module, mesh: Mesh, rules: ShardingRules | None = None
) -> Callable[[jax.Array, jax.Array | None], jax.Array]:
    """Returns f(tokens [B,T], positions=None) -> float32 logits [B,T,V], jitted with NamedSharding in/out.

    The parameters stay where they are (call `shard_model` or `create_sharded` first); tokens are split over
    the batch axes and logits come back sharded over batch and vocab. One compilation per input shape.
    """
    rules = rules or DEFAULT_RULES
    graphdef, state = nnx.split(model)
    state_sh = param_shardings(state, mesh, rules)
    compiled: dict[tuple[int, int], Callable] = {}

    def pure(st: Any, tokens: jax.Array, positions: jax.Array) -> jax.Array:
        logits, _ = nnx.merge(graphdef, st)(tokens, positions)
        return logits

    def forward(tokens: jax.Array, positions: jax.Array | None = None) -> jax.Array:
        state = nnx.state(model)  # read at call time, so later parameter updates are seen
        tokens = jnp.asarray(tokens, jnp.int32)
        b, t = tokens.shape
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        if (b, t) not in compiled:
            tok_sh = activation_sharding(mesh, ("batch", "length"), (b, t), rules)
            out_sh = activation_sharding(mesh, ("batch", "length", "vocab"), (b, t, model.cfg.vocab_size), rules)
            compiled[(b, t)] = jax.jit(pure, in_shardings=(state_sh, tok_sh, tok_sh), out_shardings=out_sh)
        with jax.set_mesh(mesh), use_rules(rules):
            return compiled[(b, t)](state, tokens, jnp.asarray(positions, jnp.int32))

    return forward


def local_replica(model: nnx.Module, mesh: Mesh) -> nnx.Module:
    """A copy of `model` whose arrays are whole on every device of `mesh` (this process's devices): what one host
    of a multi-host job samples from, with no collective per decode step. Parameters sharded across processes
    are gathered (a collective: every process calls this together); fully replicated ones are copied from this
    process's own shard."""
    from jax.experimental import multihost_utils

    graphdef, state = nnx.split(model)
    whole = NamedSharding(mesh, PartitionSpec())

    def copy(x: Any) -> Any:
        if not isinstance(x, jax.Array):
            return x
        if x.is_fully_addressable or x.is_fully_replicated:
            value = x.addressable_data(0) if x.is_fully_replicated else x
        else:
            value = multihost_utils.process_allgather(x, tiled=True)
        return jax.device_put(value, whole)

    return nnx.merge(graphdef, jax.tree.map(copy, state))
