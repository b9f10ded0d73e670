"""The model's arrays and the compiled programs that run on them, for the sampler and its decode engine.

`Runtime` keeps the split model (graph + parameters, referenced, not copied), the mesh and sharding rules, and
one compiled program per key (`run(key, fn, args)` compiles on first use: `compile_count`, `compile_seconds`, and
`compile_by_kind`: seconds by the key's first element). Every program is traced with the runtime's decode
attention (`model.decode_attention`: "xla", "pallas" reading each row's live slots only, or "auto").
It also makes the CPU-fast decode weight layouts on first use (`DecodeLayouts`: the tied head as [E, V], the
projections as [out, in] for batch-1 decoding, a stacked model's blocks as per-layer copies for larger
batches). `update(model)` swaps the parameters: programs are kept when
every parameter keeps its shape, dtype and sharding, and every layout made from the old weights is dropped.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from spade_jax.model import decode_attention
from spade_jax.model.kv_cache import DecodeLayouts
from spade_jax.model.sharding import DEFAULT_RULES, activation_sharding, use_rules


def _signature(state: Any) -> Any:
    return jax.tree.map(lambda x: (x.shape, x.dtype, getattr(x, "sharding", None)), state)


class Runtime:
    """Model arrays + compiled programs keyed by shape (see module doc)."""

    def __init__(self, model: nnx.Module, *, mesh: jax.sharding.Mesh | None = None, rules: Any = None,
                 transpose_head: bool = True, matvec_layout: bool = True, attention: str = "xla"):  # fmt: skip
        self.mesh = mesh
        self.attention = decode_attention.check(attention)
        self.rules = rules or DEFAULT_RULES
        self.transpose_head, self.matvec_layout = transpose_head, matvec_layout
        self.programs: dict[tuple, Any] = {}
        self.compile_count = 0
        self.compile_seconds = 0.0
        self.compile_by_kind: collections.Counter = collections.Counter()  # seconds spent compiling, by key[0]
        self.graphdef, self.state, self._sig, self.cfg = None, None, None, None
        self._head, self._kernels_t, self._layers = None, None, None
        self.update(model)

    def update(self, model: nnx.Module) -> None:
        """Runs new parameters from now on; drops the layouts made from the old ones."""
        graphdef, state = nnx.split(model)
        sig = _signature(state)
        if graphdef != self.graphdef or sig != self._sig:
            self.programs.clear()
        self.graphdef, self.state, self._sig, self.cfg = graphdef, state, sig, model.cfg
        self._head, self._kernels_t, self._layers = None, None, None
        if self.transpose_head and model.cfg.tie_embeddings:  # a device-side [E, V] copy of the tied embedding
            self._head = self.run(
                ("head",), lambda st: nnx.merge(graphdef, st).decode_layouts(head=True).head, (state,)
            )

    def model(self, state: Any) -> nnx.Module:
        """The model over `state` (inside a traced function)."""
        return nnx.merge(self.graphdef, state)

    def layouts(self, batch: int) -> DecodeLayouts:
        """The decode weight layouts for a batch of `batch` rows (on CPU: the transposed kernels at batch 1, a
        stacked model's per-layer blocks above it; XLA:CPU would copy each layer's slice on every step)."""
        cpu = self.mesh is None and jax.default_backend() == "cpu"
        graphdef = self.graphdef
        if batch == 1 and self.matvec_layout and cpu:
            if self._kernels_t is None:  # made on first use, kept until update
                kernels = lambda st: nnx.merge(graphdef, st).decode_layouts(kernels=True).kernels
                self._kernels_t = self.run(("kernels_t",), kernels, (self.state,))
            return DecodeLayouts(head=None, kernels=self._kernels_t)
        if cpu and self.cfg.scanned:
            if self._layers is None:
                layers = lambda st: nnx.merge(graphdef, st).decode_layouts(layers=True).layers
                self._layers = self.run(("layers",), layers, (self.state,))
            return DecodeLayouts(head=self._head, layers=self._layers)
        return DecodeLayouts(head=self._head, kernels=None)

    def put(self, x: Any, names: tuple = ()) -> jax.Array:
        """Host value -> device array; on a mesh split by the activation names (replicated when names=())."""
        x = x if isinstance(x, jax.Array) else jnp.asarray(x)
        if self.mesh is None:
            return x
        if not names:
            return jax.device_put(x, jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec()))
        return jax.device_put(x, activation_sharding(self.mesh, names, x.shape, self.rules))

    def put_rows(self, x: np.ndarray) -> jax.Array:
        """A per-row host array [B, ...] on device, split by batch."""
        return self.put(x, ("batch",) + (None,) * (np.ndim(x) - 1))

    def run(self, key: tuple, fn: Callable, args: tuple, donate: tuple[int, ...] = ()) -> Any:
        """fn(*args) through its compiled program (compiled on first use of `key`)."""
        prog = self.programs.get(key)
        if prog is None:
            t = time.perf_counter()
            with self._mesh_ctx():
                prog = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
            seconds = time.perf_counter() - t
            self.compile_seconds += seconds
            self.compile_by_kind[key[0]] += seconds
            self.compile_count += 1
            self.programs[key] = prog
        with self._mesh_ctx():
            return prog(*args)

    def _mesh_ctx(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(decode_attention.use(self.attention))
        if self.mesh is not None:
            stack.enter_context(jax.set_mesh(self.mesh))
            stack.enter_context(use_rules(self.rules))
        return stack
