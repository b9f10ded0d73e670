"""The live objects of a run (`Parts`) and how they are built: the model, the sandbox pool, the sampler,
the learner and the self-play half, wired together. A failure while wiring closes the pool it started.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_jax.config.run import RunConfig
from spade_jax.envs.source import EnvSource
from spade_jax.infra.hosts import Hosts
from spade_jax.interfaces import EnvPool, SamplerLike, TokenizerLike
from spade_jax.selfplay.cycle import FixedPool, SelfPlay

if TYPE_CHECKING:
    from flax import nnx

    from spade_jax.rl.learner import Learner

__all__ = ["Parts", "build"]

log = logging.getLogger("spade_jax")


@dataclass
class Parts:
    """The live objects of a run. The loop hands each function the parts it uses, not this whole."""

    cfg: RunConfig
    run_dir: Path
    model: nnx.Module
    tokenizer: TokenizerLike
    sampler: SamplerLike
    pool: EnvPool
    learner: Learner
    selfplay: SelfPlay
    fixed_pool: FixedPool | None = None  # loop.pool=<pool>: the baselines' environments (designer off)
    held_out: list[EnvSource] = field(default_factory=list)
    hosts: Hosts = Hosts()

    def sync_sampler(self) -> None:
        """Points the sampler at the learner's current parameters: the same arrays on one process; on several,
        a copy whole on this host's devices (`local_replica`, a collective: every host calls it together).
        Float32 master weights of a bfloat16 run reach it as a bfloat16 copy (`decode_weights`)."""
        model = decode_weights(self.learner.model)
        if self.hosts.count > 1:
            from spade_jax.model.placement import local_replica

            model = local_replica(model, self.sampler.mesh)
        self.sampler.update_model(model)


def decode_weights(model: Any) -> Any:
    """The model the sampler decodes from: `model` itself, or where its parameters are float32 masters and it
    computes in bfloat16 (the paper presets), a bfloat16 copy with one module per layer, made on device with the
    masters' sharding and remade at every sync, in a model built for bfloat16 parameters (each matmul takes the
    bfloat16 weight as it is and accumulates in float32). The same values to float32 rounding of a sum (the
    masters' matmuls round their weights to bfloat16 anyway), half the bytes each decode step reads, no float32
    weight inside the decode programs, and no per-step copy of a layer's slice of stacked weights (a decode step
    runs its layers unrolled; XLA copies a slice of a stacked array before a matmul reads it). It costs 2 bytes
    per parameter beside the masters (docs/scaling.md's plan)."""
    import jax.numpy as jnp
    from flax import nnx

    cfg = model.cfg
    if not (cfg.jnp_param_dtype == jnp.float32 and cfg.jnp_dtype == jnp.bfloat16):
        return model
    _, state = nnx.split(model)
    return nnx.merge(_bfloat16_graph(type(model), cfg), _bfloat16_cast()(state))


_GRAPHS: dict[str, Any] = {}


def _bfloat16_graph(kind: type, cfg: Any) -> Any:
    """The graph of `kind(cfg with bfloat16 parameters, one module per layer)`, built abstractly once per config
    (the sampler keeps its programs across syncs while the graph stays the same)."""
    from flax import nnx

    key = f"{kind.__qualname__}:{cfg!r}"
    if key not in _GRAPHS:
        copy = cfg.replace(param_dtype="bfloat16", scan_layers=False)
        _GRAPHS[key] = nnx.split(nnx.eval_shape(lambda: kind(copy, rngs=nnx.Rngs(0))))[0]
    return _GRAPHS[key]


@functools.cache
def _bfloat16_cast() -> Any:
    """One jitted program (kept across syncs): float32 leaves to bfloat16, the others as they are, stacked blocks
    split per layer."""
    import jax
    import jax.numpy as jnp

    from spade_jax.model.layer_stack import unstack_state

    def cast(state: Any) -> Any:
        return unstack_state(jax.tree.map(lambda x: x.astype(jnp.bfloat16) if x.dtype == jnp.float32 else x, state))

    return jax.jit(cast)


def build(cfg: RunConfig, run_dir: Path, *, progress: Any = None) -> Parts:
    """Loads the model, starts the sandbox pool, and wires sampler, self-play and learner together."""
    from spade_jax.model.loading import load_model
    from spade_jax.model.sharding import make_mesh
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig

    hosts = Hosts.current()
    if hosts.count > 1:  # the learner spans every host's devices (fsdp by default), each host samples alone
        mesh = make_mesh(_mesh_shape(cfg.mesh) if cfg.mesh else {"fsdp": -1})
    else:
        mesh = make_mesh(_mesh_shape(cfg.mesh)) if cfg.mesh else None
    _, model, tokenizer = load_model(cfg.model, mesh=mesh, param_dtype=cfg.param_dtype, dtype=cfg.dtype)
    sampler = _sampler(model, tokenizer, cfg, mesh, hosts)
    limits = dataclasses.asdict(cfg.sandbox_limits)
    sandbox = SandboxConfig(level=cfg.sandbox, call_timeout_s=cfg.call_timeout_s, **limits)
    pool = HostPool(cfg.num_workers, sandbox, sessions_per_worker=cfg.sessions_per_worker)
    log.info("sandbox level in force: %s (%d workers x %d sessions)", pool.level, cfg.num_workers,
             pool.sessions_per_worker)  # fmt: skip
    try:
        return _wire(cfg, run_dir, model, tokenizer, sampler, pool, mesh, hosts)
    except BaseException:  # a bad config, Ctrl-C, SIGTERM: the sandboxes and their temp dirs go either way
        pool.close()
        raise


def _sampler(model: Any, tokenizer: Any, cfg: RunConfig, mesh: Any, hosts: Hosts) -> Any:
    """The run's sampler: on the learner's own arrays (one process), or on a replica of them whole on this
    host's devices, split by batch (several: a host's decoding never waits for another host)."""
    from spade_jax.model.placement import local_replica
    from spade_jax.model.sharding import make_mesh
    from spade_jax.sampling import Sampler

    model = decode_weights(model)
    if hosts.count > 1:
        import jax

        mesh = make_mesh({"data": -1}, devices=jax.local_devices())
        model = local_replica(model, mesh)
    return Sampler(model, tokenizer, mesh=mesh, max_total_len=cfg.max_total_len, decode_slots=cfg.decode_slots,
                   decode_attention=cfg.decode_attention)  # fmt: skip


def _wire(cfg: RunConfig, run_dir: Path, model: Any, tokenizer: Any, sampler: Any, pool: Any, mesh: Any,
          hosts: Hosts = Hosts()) -> Parts:  # fmt: skip
    """The learner, memory and self-play around a started pool (`build`, which closes the pool on failure)."""
    from spade_jax.envs.seeds import list_seeds
    from spade_jax.rl.learner import Learner
    from spade_jax.trajectory import ROLE_NAMES

    learner = Learner(model, cfg.learner, mesh=mesh, role_names=ROLE_NAMES)

    seeds = {s.name: s for s in list_seeds()}
    unknown = [n for n in cfg.loop.held_out if n not in seeds]
    if unknown:
        raise ValueError(f"loop.held_out names unknown seed environments: {', '.join(unknown)}")
    held_out = [seeds[n] for n in cfg.loop.held_out]
    sp_cfg = cfg.selfplay.seeded(cfg.loop.seed)
    library = [s for n, s in seeds.items() if n not in cfg.loop.held_out]  # the seeds a self-play run archives
    fixed_pool = None
    if cfg.loop.pool != "selfplay":
        library = []
        from spade_jax.envs.pools import load_pool

        envs = tuple(e for e in load_pool(cfg.loop.pool) if e.name not in cfg.loop.held_out)
        if not envs:
            raise ValueError(f"environment pool {cfg.loop.pool!r} is empty")
        fixed_pool = FixedPool(envs, cfg.loop.pool_envs_per_step, cfg.loop.seed)
    selfplay = SelfPlay(sp_cfg, sampler=sampler, tokenizer=tokenizer, pool=pool, run_dir=run_dir, library=library,
                        hosts=hosts)  # fmt: skip
    return Parts(cfg, run_dir, model, tokenizer, sampler, pool, learner, selfplay, fixed_pool, held_out, hosts)


def _mesh_shape(spec: str) -> dict[str, int]:
    from spade_jax.config.run import mesh_shape  # checked when the config loaded; parsed by the same rule here

    return mesh_shape(spec)
