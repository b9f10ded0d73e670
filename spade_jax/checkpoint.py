"""Orbax checkpoints of a run: array trees (params, optimizer state) plus a JSON record of everything else.

The JSON record holds the step, RNG state, corpus iterator state, the environment-memory snapshot and the
resolved config, so `--resume` continues exactly. Orbax only lists finished checkpoints, so a `kill -9`
during an (async) save leaves the previous one as the latest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


def _abstract(tree: Any) -> Any:
    """Shape/dtype/sharding stand-ins so restore places arrays straight into their shardings."""

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        return x

    return jax.tree.map(leaf, tree)


class Checkpointer:
    """Saves and restores `{name: pytree}` plus a JSON `meta` dict under `directory/<step>/`."""

    def __init__(self, directory: str | Path, *, max_to_keep: int = 2, async_save: bool = True):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, trees: dict[str, Any], meta: dict[str, Any], *, wait: bool = False) -> None:
        """Starts saving (async by default); the previous save is finished first."""
        args = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
        args["meta"] = ocp.args.JsonSave(meta)
        self._manager.save(step, args=ocp.args.Composite(**args), force=True)
        if wait:
            self._manager.wait_until_finished()

    def restore(self, step: int | None, templates: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restores the trees shaped like `templates` (into the templates' shardings) and the meta dict."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no finished checkpoint in {self.directory}")
        args = {name: ocp.args.StandardRestore(_abstract(t)) for name, t in templates.items()}
        args["meta"] = ocp.args.JsonRestore()
        out = self._manager.restore(step, args=ocp.args.Composite(**args))
        trees = {name: out[name] for name in templates}
        return trees, dict(out["meta"])

    def restore_meta(self, step: int | None = None) -> dict[str, Any]:
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no finished checkpoint in {self.directory}")
        out = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"])

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
