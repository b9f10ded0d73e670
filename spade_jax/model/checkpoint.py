"""Orbax checkpoints of model parameters, restored directly into their shardings on any mesh.

Parameters are saved in the model's own block layout (stacked for a scanned model); a checkpoint in the other
layout (one written before blocks were stacked) restores too, converted on the way (`layer_stack.LayerRelayout`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, SingleDeviceSharding

from spade_jax.model.config import ModelConfig
from spade_jax.model.layer_stack import LayerRelayout
from spade_jax.model.sharding import ShardingRules, param_shardings
from spade_jax.model.transformer import Transformer


def save_params(model: nnx.Module, path: str | Path) -> Path:
    """Saves the model's parameters (a nested dict of arrays, sharded or not) to a new directory `path`."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    if path.exists():
        raise FileExistsError(f"{path}: checkpoint already exists")
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, nnx.to_pure_dict(nnx.state(model, nnx.Param)))
        ckptr.wait_until_finished()
    return path


def restore_params(
    path: str | Path, cfg: ModelConfig, *, mesh: Mesh | None = None, rules: ShardingRules | None = None
) -> Transformer:
    """Restores a Transformer saved by `save_params` (in either block layout); with a mesh each array lands in its
    rules' sharding, without one on the default device. Shapes and dtypes come from `cfg` (a mismatch raises
    ValueError)."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    if mesh is not None:
        shardings = param_shardings(abstract, mesh, rules)
    else:
        device = SingleDeviceSharding(jax.devices()[0])
        shardings = jax.tree.map(lambda _: device, abstract, is_leaf=lambda x: isinstance(x, nnx.Variable))

    def target(var: nnx.Variable, sharding: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(var.shape, var.dtype, sharding=sharding)

    abstract_arrays = jax.tree.map(target, abstract, shardings, is_leaf=lambda x: isinstance(x, nnx.Variable))
    relayout = LayerRelayout()
    with ocp.StandardCheckpointer() as ckptr:
        meta = getattr(ckptr.metadata(path), "item_metadata", None) or ckptr.metadata(path)
        names = [str(getattr(m, "name", "")) for m in jax.tree.leaves(meta)]
        stored = relayout.stored_template(abstract_arrays, names)
        pure = nnx.to_pure_dict(abstract_arrays if stored is None else stored)
        _check_fits(path, meta, pure)
        restored = ckptr.restore(path, pure)
    if stored is not None:  # the other block layout: convert, then use the model's own
        nnx.replace_by_pure_dict(stored, restored)
        restored = nnx.to_pure_dict(relayout.restored(stored, abstract_arrays))
    nnx.replace_by_pure_dict(abstract, restored)
    return nnx.merge(graphdef, abstract)


def _check_fits(path: Path, meta: Any, target: dict) -> None:
    """Compares stored names and shapes with the target before reading, for a one-line error on a mismatch."""
    stored = {m.name: tuple(m.shape) for m in jax.tree.leaves(meta) if hasattr(m, "shape")}
    wanted = {}
    for keys, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
        wanted[".".join(str(getattr(k, "key", k)) for k in keys)] = tuple(leaf.shape)
    missing = sorted(set(wanted) - set(stored))
    if missing:
        more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"{path}: checkpoint lacks {missing[0]}{more}; was it saved for another config?")
    for name, shape in wanted.items():
        if stored[name] != shape:
            raise ValueError(f"{path}: {name} has shape {stored[name]} in the checkpoint, expected {shape}")
