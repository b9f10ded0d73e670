"""The two layouts of a model's blocks in a parameter tree, and the conversion between them (old checkpoints).

Stacked (`ModelConfig.scanned`, the default): `layers` holds each block parameter once, with a leading
[num_layers] axis (`layers.attn.q_proj.kernel` [L, E, H*D]). Per layer (a model that keeps one module per layer,
and every checkpoint written before blocks were stacked): `layers` holds one subtree per layer under the keys
0..L-1 (`layers.0.attn.q_proj.kernel` [E, H*D]).

`stack_state` / `unstack_state` convert one `nnx.State` (values may be arrays, or `jax.ShapeDtypeStruct`s whose
shardings follow: a leading axis is unsharded); `LayerRelayout` lets `rundir.checkpoints.Checkpointer` restore a
checkpoint saved in one layout into a template in the other (parameters and the optimizer's moments alike).
`logical_ndim` is a parameter's rank without the stacking axis (weight decay skips per-layer vectors).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

__all__ = ["LayerRelayout", "is_stacked", "logical_ndim", "stack_state", "stacked_layout", "unstack_state"]

LAYERS = "layers"
_PER_LAYER_NAME = re.compile(r"(^|\.)layers\.\d+\.")  # a stored array name of the per-layer layout
_STACKED_NAME = re.compile(r"(^|\.)layers\.[A-Za-z_]")


def _key(k: Any) -> Any:
    """A pytree path entry (DictKey, GetAttrKey, SequenceKey) or a flat-state key, as a plain str / int."""
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return k


def _is_index(k: Any) -> bool:
    k = _key(k)
    return isinstance(k, int) or (isinstance(k, str) and k.isdigit())


def is_stacked(path: Sequence[Any]) -> bool:
    """Whether the parameter at `path` (a pytree path or a flat-state key tuple) is a stacked block parameter: a
    `layers` entry followed by a name, not a layer index."""
    keys = [_key(k) for k in path]
    return any(k == LAYERS and i + 1 < len(keys) and not _is_index(keys[i + 1]) for i, k in enumerate(keys))


def logical_ndim(path: Sequence[Any], x: Any) -> int:
    """The rank of the parameter at `path` as one layer sees it (a stacked parameter's first axis not counted)."""
    return jnp.ndim(x) - (1 if is_stacked(path) else 0)


def stacked_layout(state: Any) -> bool | None:
    """True for a state whose `layers` is stacked, False for one per layer, None without `layers`."""
    if not isinstance(state, nnx.State) or LAYERS not in state:
        return None
    keys = list(state[LAYERS].keys())
    return not (keys and all(_is_index(k) for k in keys))


def _drop_first(sharding: Any) -> Any:
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, PartitionSpec(*tuple(sharding.spec)[1:]))
    return sharding


def _add_first(sharding: Any) -> Any:
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, PartitionSpec(None, *tuple(sharding.spec)))
    return sharding


def _raw(var: Any) -> Any:
    return var.get_value() if isinstance(var, nnx.Variable) else var


def _is_abstract(x: Any) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def _rewrap(var: Any, value: Any) -> Any:
    return var.replace(value) if isinstance(var, nnx.Variable) else value


def unstack_state(state: nnx.State) -> nnx.State:
    """`layers.X` [L, ...] -> `layers.{i}.X` [...]; a state without stacked layers is returned as it is."""
    if stacked_layout(state) is not True:
        return state
    out = {}
    for path, var in nnx.to_flat_state(state):
        if path[0] != LAYERS:
            out[path] = var
            continue
        x = _raw(var)
        for i in range(x.shape[0]):
            if _is_abstract(x):
                part = jax.ShapeDtypeStruct(x.shape[1:], x.dtype, sharding=_drop_first(getattr(x, "sharding", None)))
            else:
                part = x[i]
            out[(LAYERS, i, *path[1:])] = _rewrap(var, part)
    return nnx.from_flat_state(out)


def stack_state(state: nnx.State) -> nnx.State:
    """`layers.{i}.X` [...] -> `layers.X` [L, ...]; a state without per-layer layers is returned as it is."""
    if stacked_layout(state) is not False:
        return state
    out, groups = {}, {}
    for path, var in nnx.to_flat_state(state):
        if path[0] != LAYERS:
            out[path] = var
        else:
            groups.setdefault(path[2:], {})[int(_key(path[1]))] = var
    for rest, per_layer in groups.items():
        vars_ = [per_layer[i] for i in range(len(per_layer))]
        first = _raw(vars_[0])
        if _is_abstract(first):
            sharding = _add_first(getattr(first, "sharding", None))
            value = jax.ShapeDtypeStruct((len(vars_), *first.shape), first.dtype, sharding=sharding)
        else:
            value = jnp.stack([_raw(v) for v in vars_])
        out[(LAYERS, *rest)] = _rewrap(vars_[0], value)
    return nnx.from_flat_state(out)


def _map_states(fn, tree: Any) -> Any:
    is_state = lambda x: isinstance(x, nnx.State)
    return jax.tree.map(lambda x: fn(x) if is_state(x) else x, tree, is_leaf=is_state)


def _layouts(tree: Any) -> set[bool]:
    found: set[bool] = set()
    _map_states(lambda st: found.add(stacked_layout(st)) or st, tree)
    return found - {None}


class LayerRelayout:
    """Restores trees saved in the other block layout (`rundir.checkpoints.Relayout`): a stacked model reads a
    per-layer checkpoint (written before blocks were stacked, or by an unscanned model), and the other way round.
    The stored layout is read from the checkpoint's array names (`layers.0.` vs `layers.attn.`)."""

    def stored_template(self, template: Any, stored_names: Sequence[str]) -> Any | None:
        """`template` laid out as the checkpoint stores it, or None when it already is."""
        wanted = _layouts(template)
        per_layer = any(_PER_LAYER_NAME.search(n) for n in stored_names)
        stacked = any(_STACKED_NAME.search(n) for n in stored_names)
        if wanted == {True} and per_layer and not stacked:
            return _map_states(unstack_state, template)
        if wanted == {False} and stacked and not per_layer:
            return _map_states(stack_state, template)
        return None

    def restored(self, tree: Any, template: Any) -> Any:
        """A tree restored in the stored layout, converted to `template`'s, each array in its template's sharding."""
        wanted = _layouts(template)
        tree = _map_states(stack_state if wanted == {True} else unstack_state, tree)

        def place(x: Any, t: Any) -> Any:
            sharding = getattr(t, "sharding", None)
            return jax.device_put(x, sharding) if sharding is not None and isinstance(x, jax.Array) else x

        return jax.tree.map(place, tree, template)
