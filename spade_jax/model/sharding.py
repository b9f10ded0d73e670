"""Device mesh and logical-axis rules: which mesh axes each named dimension of a parameter or activation uses.

A leaf of the model package (it imports no model code); placing a model on a mesh is `placement.py`.

Parameters carry logical axis names (`logical_axes` metadata, e.g. ("embed", "mlp")); `ShardingRules` maps
those names, and activation names (batch, length, embed, heads, vocab, ...), onto the mesh axes
("data", "fsdp", "expert", "tensor"). A dimension that a mesh axis does not divide stays replicated on it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

if TYPE_CHECKING:
    pass

MESH_AXES = ("data", "fsdp", "expert", "tensor")  # outermost first: "tensor" gets the closest devices
MeshAxes = str | tuple[str, ...] | None


@dataclass(frozen=True)
class ShardingRules:
    """Logical axis name -> mesh axis, tuple of mesh axes, or None (replicated); one table per kind of array.

    Defaults: FSDP over "fsdp" (embed dim of every weight) plus tensor parallelism over "tensor" (heads, mlp,
    vocab); the batch is split over data x fsdp x expert. MoE expert kernels are split over "expert" (expert
    parallelism); every other weight's embed dim is split over fsdp x expert, so an expert axis never leaves
    the dense weights and their optimizer state replicated.
    """

    params: tuple[tuple[str, MeshAxes], ...] = (
        ("vocab", "tensor"),
        ("embed", ("fsdp", "expert")),  # "expert" is taken first by the expert dim of expert kernels
        ("q_heads", "tensor"),
        ("kv_heads", "tensor"),
        ("mlp", "tensor"),
        ("expert", "expert"),
        ("norm", None),
        ("head_dim", None),
        ("layers", None),  # a stacked model's layer axis: every device holds every layer's shard (FSDP splits E)
    )
    activations: tuple[tuple[str, MeshAxes], ...] = (
        ("batch", ("data", "fsdp", "expert")),
        ("length", None),
        ("embed", None),
        ("heads", "tensor"),
        ("kv_heads", "tensor"),
        ("head_dim", None),
        ("mlp", "tensor"),
        ("vocab", "tensor"),
        ("expert", "expert"),
    )

    def replace(
        self, *, params: Mapping[str, MeshAxes] | None = None, activations: Mapping[str, MeshAxes] | None = None
    ) -> ShardingRules:
        """Returns a copy with some entries overridden (or added), e.g. `replace(params={"embed": None})`."""
        new_p = {**dict(self.params), **dict(params or {})}
        new_a = {**dict(self.activations), **dict(activations or {})}
        return dataclasses.replace(self, params=tuple(new_p.items()), activations=tuple(new_a.items()))

    def param_spec(self, names: Sequence[str | None], shape: Sequence[int] | None = None, mesh=None) -> PartitionSpec:
        """PartitionSpec for a parameter with these logical axes (dims the mesh cannot divide stay replicated)."""
        return _spec(dict(self.params), names, shape, mesh, "parameter")

    def activation_spec(
        self, names: Sequence[str | None], shape: Sequence[int] | None = None, mesh=None
    ) -> PartitionSpec:
        """PartitionSpec for an activation with these logical axes."""
        return _spec(dict(self.activations), names, shape, mesh, "activation")


DEFAULT_RULES = ShardingRules()
_ACTIVE_RULES: contextvars.ContextVar[ShardingRules] = contextvars.ContextVar("spade_jax_rules", default=DEFAULT_RULES)


def _spec(
    table: dict[str, MeshAxes], names: Sequence[str | None], shape: Sequence[int] | None, mesh, kind: str
) -> PartitionSpec:
    sizes = dict(mesh.shape) if mesh is not None else None
    used: set[str] = set()
    out: list[Any] = []
    for i, name in enumerate(names):
        if name is None:
            out.append(None)
            continue
        if name not in table:
            raise ValueError(f"no sharding rule for {kind} logical axis {name!r}; known: {sorted(table)}")
        axes = table[name]
        axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        picked: list[str] = []
        n = 1
        for ax in axes:
            if ax in used or (sizes is not None and sizes.get(ax, 1) == 1):
                continue  # a mesh axis may split only one dim; axes of size 1 or missing from the mesh are skipped
            size = sizes[ax] if sizes is not None else 1
            if shape is not None and shape[i] % (n * size):
                continue  # not divisible: leave this dim replicated over that axis
            picked.append(ax)
            n *= size
        used.update(picked)
        out.append(None if not picked else picked[0] if len(picked) == 1 else tuple(picked))
    while out and out[-1] is None:
        out.pop()
    return PartitionSpec(*out)


def make_mesh(shape: Mapping[str, int] | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Builds a mesh with axes ("data", "fsdp", "expert", "tensor"); unnamed axes get size 1.

    `shape` maps axis -> size, one size may be -1 (takes the remaining devices); default: all devices on "fsdp".
    """
    devices = list(devices) if devices is not None else jax.devices()
    shape = dict(shape) if shape else {"fsdp": -1}
    unknown = set(shape) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"unknown mesh axes {sorted(unknown)}; expected some of {MESH_AXES}")
    sizes = {ax: int(shape.get(ax, 1)) for ax in MESH_AXES}
    free = [ax for ax, s in sizes.items() if s == -1]
    if len(free) > 1 or any(s == 0 or s < -1 for s in sizes.values()):
        raise ValueError(f"bad mesh shape {shape}: sizes must be positive, at most one may be -1")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if free:
        if len(devices) % fixed:
            raise ValueError(f"mesh shape {shape} does not divide the {len(devices)} devices")
        sizes[free[0]] = len(devices) // fixed
    if math.prod(sizes.values()) != len(devices):
        raise ValueError(f"mesh shape {shape} needs {math.prod(sizes.values())} devices, have {len(devices)}")
    axis_types = (jax.sharding.AxisType.Auto,) * len(MESH_AXES)
    return jax.make_mesh(tuple(sizes.values()), MESH_AXES, axis_types=axis_types, devices=devices)


def _is_var(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def _as_state(tree: Any) -> Any:
    return nnx.state(tree) if isinstance(tree, nnx.Module) else tree


def param_specs(abstract_state: Any, mesh: Mesh, rules: ShardingRules | None = None) -> Any:
    """PartitionSpec tree for a model (or its state, abstract or concrete): one spec in place of each Variable."""
    rules = rules or DEFAULT_RULES

    def spec(x: Any) -> PartitionSpec:
        axes = x.get_metadata().get("logical_axes") if _is_var(x) else None
        shape = x.shape if hasattr(x, "shape") else jnp.shape(x)
        if axes is None:
            return PartitionSpec()
        if len(axes) != len(shape):
            raise ValueError(f"logical_axes {axes} do not match a parameter of shape {tuple(shape)}")
        return rules.param_spec(axes, shape, mesh)

    return jax.tree.map(spec, _as_state(abstract_state), is_leaf=_is_var)


def param_shardings(abstract_state: Any, mesh: Mesh, rules: ShardingRules | None = None) -> Any:
    """NamedSharding tree (a prefix of the state tree: one sharding per Variable), for jit and device_put."""
    return jax.tree.map(lambda p: NamedSharding(mesh, p), param_specs(abstract_state, mesh, rules))


def activation_sharding(
    mesh: Mesh, names: Sequence[str | None], shape: Sequence[int], rules: ShardingRules | None = None
) -> NamedSharding:
    """NamedSharding for an activation of this shape, e.g. tokens ("batch", "length")."""
    return NamedSharding(mesh, (rules or DEFAULT_RULES).activation_spec(names, shape, mesh))


@contextlib.contextmanager
def use_rules(rules: ShardingRules) -> Iterator[ShardingRules]:
    """Makes `rules` the ones `constrain` applies inside the model (default: DEFAULT_RULES)."""
    token = _ACTIVE_RULES.set(rules)
    try:
        yield rules
    finally:
        _ACTIVE_RULES.reset(token)


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """Sharding constraint by activation names under the current `jax.set_mesh` mesh; a no-op without one."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not set(mesh.axis_names) & set(MESH_AXES):
        return x
    if any(t != jax.sharding.AxisType.Auto for t in mesh.axis_types):
        return x  # Explicit meshes carry shardings in the types; Manual (shard_map) bodies are per-device
    spec = _ACTIVE_RULES.get().activation_spec(names, x.shape, mesh)
    return jax.lax.with_sharding_constraint(x, spec)
