"""The learner: AdamW on the shared policy, one jitted (optionally mesh-sharded) step, micro-batch accumulation.

Parameters live in the nnx model the caller passes in, which is the same module object the sampler reads.
Each step reads the current `nnx.Param` arrays from the model, runs jitted pure functions on them, and
writes the new arrays back with `nnx.update` (device arrays with the same shardings; no host copy). With
`donate=True` (default) the previous arrays are donated to XLA and deleted, so a sampler that cached a
split of the model must call `sampler.update_model(learner.model)` after every step (a pointer swap).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from spade_jax.config.learner import ATTENTION_IMPLS, REMAT_POLICY_NAMES, LearnerConfig
from spade_jax.model.layer_stack import logical_ndim
from spade_jax.model.sharding import DEFAULT_RULES, ShardingRules, activation_sharding, param_shardings, use_rules
from spade_jax.model.train_attention import IMPLS
from spade_jax.model.transformer import REMAT_POLICIES, ForwardOptions
from spade_jax.rl.batch import TrainBatch
from spade_jax.rl.losses import cross_entropy_loss, policy_loss, token_logprobs

assert tuple(REMAT_POLICIES) == REMAT_POLICY_NAMES
assert IMPLS == ATTENTION_IMPLS


def make_schedule(cfg: LearnerConfig) -> optax.Schedule:
    """Learning rate per optimizer update: linear warmup from 0, then constant / cosine / linear decay."""
    if cfg.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, cfg.warmup_steps, cfg.total_steps, 0.0)
    if cfg.schedule == "linear":
        decay = optax.linear_schedule(cfg.lr, 0.0, cfg.total_steps - cfg.warmup_steps)
    else:
        decay = optax.constant_schedule(cfg.lr)
    if cfg.warmup_steps <= 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, cfg.lr, cfg.warmup_steps), decay], [cfg.warmup_steps])


def make_optimizer(cfg: LearnerConfig) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW with the configured schedule. Unless `decay_vectors`, weight decay skips
    parameters that are vectors per layer (norm scales, biases), a stacked model's [L, E] scales included."""
    mask = None if cfg.decay_vectors else (lambda params: jax.tree_util.tree_map_with_path(_is_matrix, params))
    adamw = optax.adamw(
        make_schedule(cfg), b1=cfg.betas[0], b2=cfg.betas[1], eps=cfg.eps, weight_decay=cfg.weight_decay, mask=mask
    )
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), adamw) if cfg.grad_clip > 0 else adamw


def _is_matrix(path: tuple, x: Any) -> bool:
    return logical_ndim(path, x) >= 2


def forward_hidden(
    model: Any,
    tokens: jax.Array,
    positions: jax.Array,
    segment_ids: jax.Array,
    *,
    options: ForwardOptions | None = None,
) -> jax.Array:
    """Final hidden states [B, T, E] of packed rows through the model's own forward (causal within each segment,
    never from or to padding, segment 0), run as `options` say (remat, attention): set on `model`, so pass the
    copy a traced function merged."""
    if options is not None:
        model.set_options(options)
    hidden, _ = model(tokens, positions, segment_ids=segment_ids, return_hidden=True)
    return hidden


def _on_mesh(x: Any, mesh: Mesh) -> bool:
    return isinstance(x, jax.Array) and isinstance(x.sharding, NamedSharding) and x.sharding.mesh == mesh


def _host(x: Any) -> np.ndarray:
    return np.asarray(jax.device_get(x))


class Learner:
    """Trains `model` in place: `train_step` (clipped policy gradient), `sft_step` (masked cross-entropy),
    `logprobs` (per-token log-probs under the current params), with micro-batch gradient accumulation.

    Compiles once per (micro-batch rows, row length, optional-field pattern); `compile_count` says how many
    traces happened. With a `mesh` (Auto axes, e.g. `spade_jax.model.sharding.make_mesh`), params that are
    not already on it are placed by the logical-axis `rules` (default FSDP + tensor), the optimizer state
    follows them, batch rows are split over the "batch" activation axes, and each step keeps those layouts.

    With `kl_coef > 0` the learner holds a frozen reference (a copy of the params, same shardings, never
    donated) and, when a batch brings no `ref_logprobs`, computes them itself in `train_step`: one extra
    forward per micro-batch without gradient (a separate jitted program, one more compile per shape).
    """

    def __init__(
        self,
        model: nnx.Module,
        config: LearnerConfig | None = None,
        *,
        mesh: Mesh | None = None,
        rules: ShardingRules | None = None,
        role_names: Mapping[int, str] | None = None,
    ):
        self.model = model
        self.role_names = dict(role_names or {})  # role id -> metric prefix (the caller names its roles)
        self.config = cfg = config or LearnerConfig()
        self.mesh = mesh
        self.rules = rules or DEFAULT_RULES
        self.tx = make_optimizer(cfg)
        self.schedule = make_schedule(cfg)
        self.step = 0
        self.compile_count = 0
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        self._graphdef = graphdef
        if mesh is not None:
            if not all(_on_mesh(x, mesh) for x in jax.tree.leaves(params)):
                params = jax.device_put(params, param_shardings(params, mesh, self.rules))
            params, rest = self._to_mesh(params), self._to_mesh(rest)
            nnx.update(model, params, rest)
        self.opt_state = self._fresh_opt_state(params)
        jit_kw: dict[str, dict[str, Any]] = {"micro": {}, "apply": {}, "fused": {}}
        if mesh is not None:
            param_sh = jax.tree.map(lambda x: x.sharding, params)
            opt_sh = jax.tree.map(lambda x: x.sharding, self.opt_state)
            rep = NamedSharding(mesh, P())
            jit_kw = {
                "micro": {"out_shardings": (param_sh, rep)},
                "apply": {"out_shardings": (param_sh, opt_sh, rep)},
                "fused": {"out_shardings": (param_sh, opt_sh, rep, rep)},
            }
        donate = cfg.donate
        self._micro = jax.jit(
            self._micro_fn, static_argnames="kind", donate_argnums=(2,) if donate else (), **jit_kw["micro"]
        )
        self._apply = jax.jit(self._apply_fn, donate_argnums=(0, 1) if donate else (), **jit_kw["apply"])
        self._fused = jax.jit(
            self._fused_fn, static_argnames="kind", donate_argnums=(0, 2) if donate else (), **jit_kw["fused"]
        )
        self._logp = jax.jit(self._logp_fn)
        self._ref_params: nnx.State | None = None
        self.freeze_reference()

    # ----- state -----

    def _to_mesh(self, tree: Any) -> Any:
        replicated = NamedSharding(self.mesh, P())

        # Through the host: a device array of this process put on a mesh spanning several processes is malformed
        # (its one local device counted twice), a host value is put as every process's copy of the same value.
        return jax.tree.map(lambda x: x if _on_mesh(x, self.mesh) else jax.device_put(np.asarray(x), replicated), tree)

    def _context(self) -> contextlib.AbstractContextManager:
        """The mesh and sharding rules the model's activation constraints read while tracing and running."""
        stack = contextlib.ExitStack()
        if self.mesh is not None:
            stack.enter_context(jax.set_mesh(self.mesh))
            stack.enter_context(use_rules(self.rules))
        return stack

    def _split(self) -> tuple[nnx.State, nnx.State]:
        _, params, rest = nnx.split(self.model, nnx.Param, ...)
        return params, rest

    def freeze_reference(self) -> None:
        """Snapshots the current params as the frozen KL reference (kl_coef > 0 only; otherwise stores nothing).

        The snapshot is a copy with the params' own shardings, so donating the policy's arrays in a step never
        touches it. Taken once at construction; call again after any phase that should count as the starting
        policy (the warm start does)."""
        self._ref_params = None  # free the previous snapshot before taking the next one
        if self.config.kl_coef > 0:
            params, _ = self._split()
            self._ref_params = jax.tree.map(lambda x: jax.device_put(x, x.sharding, may_alias=False), params)

    def _fresh_opt_state(self, params: nnx.State) -> Any:
        state = self.tx.init(params)
        return state if self.mesh is None else self._to_mesh(state)

    def set_aside(self) -> None:
        """Frees the Adam moments and the KL reference while another learner trains the same model (the warm start's
        SFT learner), so that two learners' moments (8 bytes a parameter each) are never held at once. Before this
        learner's next step, `fresh_optimizer()`."""
        self.opt_state = None
        self._ref_params = None

    def fresh_optimizer(self) -> None:
        """New Adam moments and schedule count, and the current params as the KL reference (kl_coef > 0)."""
        self.opt_state = self._fresh_opt_state(self._split()[0])
        self.freeze_reference()

    @property
    def has_reference(self) -> bool:
        return self._ref_params is not None

    def get_state(self) -> dict[str, Any]:
        """Params, optimizer state and step, for checkpointing; plus `ref_params` (the frozen KL reference)
        when one is held (kl_coef > 0). Every key but `step` is an array tree."""
        state = {"params": nnx.state(self.model, nnx.Param), "opt_state": self.opt_state, "step": self.step}
        if self._ref_params is not None:
            state["ref_params"] = self._ref_params
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what `get_state` returned (arrays are used as given: put them on the right devices first).
        A state without `ref_params` keeps the reference this learner holds."""
        nnx.update(self.model, state["params"])
        self.opt_state = state["opt_state"]
        self.step = int(state["step"])
        if self.config.kl_coef > 0 and state.get("ref_params") is not None:
            self._ref_params = state["ref_params"]

    @property
    def learning_rate(self) -> float:
        return float(self.schedule(self.step))

    # ----- pure functions (jitted) -----

    def _forward_logprobs(self, params, rest, batch: TrainBatch, *, remat: bool, entropy: bool, tempered: float = 0.0):
        """(log-probs, entropy or None, tempered log-probs or None) of every token (see `token_logprobs`)."""
        model = nnx.merge(self._graphdef, params, rest)
        cfg = self.config
        options = ForwardOptions(remat=remat, remat_policy=cfg.remat_policy, query_chunk=cfg.attn_query_chunk,
                                 attention=cfg.attention)  # fmt: skip
        hidden = forward_hidden(model, batch.tokens, batch.positions, batch.segment_ids, options=options)
        out = token_logprobs(
            model.logits, hidden, batch.tokens, chunk_size=cfg.logits_chunk, with_entropy=entropy, tempered_at=tempered,
            head=model.head() if cfg.vocab_chunk else None, vocab_chunk=cfg.vocab_chunk,
        )  # fmt: skip
        predicted = (batch.positions > 0) & (batch.segment_ids > 0)  # segment starts have no prediction
        logp, ent, cold = out[0], out[1], (out[2] if tempered > 0 else None)
        return tuple(None if x is None else jnp.where(predicted, x, 0.0) for x in (logp, ent, cold))

    def _loss_fn(self, params, rest, batch: TrainBatch, norms: dict[str, jax.Array], kind: str):
        cfg = self.config
        want_entropy = kind == "rl" and (cfg.compute_entropy or cfg.entropy_coef != 0)
        tempered = cfg.tis_temperature if kind == "rl" else 0.0
        logp, ent, cold = self._forward_logprobs(params, rest, batch, remat=cfg.remat, entropy=want_entropy,
                                                 tempered=tempered)  # fmt: skip
        if kind == "sft":
            return cross_entropy_loss(logp, batch.loss_mask, normalizer=norms["tokens"])
        old = jax.lax.stop_gradient(logp) if batch.old_logprobs is None else batch.old_logprobs
        args = (old, batch.sampler_logprobs, batch.advantages)
        kw = dict(clip_low=cfg.clip_low, clip_high=cfg.clip_high, is_cap=cfg.is_cap, ref_logprobs=batch.ref_logprobs,
                  kl_clip=cfg.kl_clip, tempered_logprobs=cold)  # fmt: skip
        loss, metrics = policy_loss(
            logp, *args, batch.loss_mask, **kw, kl_coef=cfg.kl_coef, entropy=ent, entropy_coef=cfg.entropy_coef,
            normalizer=norms["tokens"], token_weights=batch.loss_weights,
        )  # fmt: skip
        logp_sg = jax.lax.stop_gradient(logp)
        ent_sg = None if ent is None else jax.lax.stop_gradient(ent)
        for role, name in self.role_names.items():
            role_mask = batch.loss_mask * (batch.roles[:, None] == role)
            _, m = policy_loss(logp_sg, *args, role_mask, **kw, entropy=ent_sg, normalizer=norms[name])
            for key in ("pg_loss", "entropy", "kl", "clip_frac_low", "clip_frac_high", "is_weight_mean"):
                if key in m:
                    metrics[f"{name}/{key}"] = m[key]
        return loss, metrics

    def _micro_fn(self, params, rest, acc, batch, norms, kind):
        self.compile_count += 1
        grads, metrics = jax.grad(self._loss_fn, has_aux=True)(params, rest, batch, norms, kind)
        if acc is not None:
            grads = jax.tree.map(jnp.add, acc, grads)
        return grads, metrics

    def _apply_fn(self, params, opt_state, grads):
        self.compile_count += 1
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grad_norm

    def _fused_fn(self, params, rest, opt_state, batch, norms, kind):
        self.compile_count += 1
        grads, metrics = jax.grad(self._loss_fn, has_aux=True)(params, rest, batch, norms, kind)
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics, grad_norm

    def _logp_fn(self, params, rest, batch):
        self.compile_count += 1
        return self._forward_logprobs(params, rest, batch, remat=False, entropy=False)[0]

    # ----- host-side driving -----

    def _micro_size(self, rows: int) -> int:
        cfg = self.config
        micro = cfg.micro_batch_size or max(rows // cfg.grad_accum_steps, 1)
        return min(micro, rows)

    def _pad_rows(self, batch: TrainBatch, multiple: int) -> TrainBatch:
        """Appends empty rows (all masks 0, role -1) so the row count is a multiple of the micro-batch."""
        n = batch.tokens.shape[0]
        extra = -n % multiple
        if not extra:
            return batch

        def pad(x, name):
            fill = -1 if name in ("roles", "sample_ids") else 0
            return np.concatenate([_host(x), np.full((extra,) + tuple(x.shape[1:]), fill, _host(x).dtype)])

        fields = {k: getattr(batch, k) for k in batch.__dataclass_fields__}
        return TrainBatch(**{k: None if v is None else pad(v, k) for k, v in fields.items()})

    def _put(self, batch: TrainBatch) -> TrainBatch:
        """Batch arrays onto the devices: rows split over the mesh's batch axes when there is a mesh."""
        if self.mesh is None:
            return jax.tree.map(jnp.asarray, batch)

        def put(x):
            names = ("batch", "length")[: np.ndim(x)]
            sharding = activation_sharding(self.mesh, names, np.shape(x), self.rules)
            if not isinstance(x, jax.Array) and not sharding.is_fully_addressable:
                # multi-host: every process holds the whole host batch and supplies its own devices' slices
                # (device_put would compare the arrays across processes, and NaN "unknown" log-probs never match)
                host = np.asarray(x)
                return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
            return jax.device_put(x, sharding)

        return jax.tree.map(put, batch)

    def _norms(self, batch: TrainBatch) -> dict[str, jax.Array]:
        mask, roles = _host(batch.loss_mask), _host(batch.roles)
        norms = {"tokens": max(float(mask.sum()), 1.0)}
        for role, name in self.role_names.items():
            norms[name] = max(float(mask[roles == role].sum()), 1.0)
        return {k: jnp.float32(v) for k, v in norms.items()}

    def _run(self, batch: TrainBatch, kind: str) -> dict[str, float]:
        rows = batch.tokens.shape[0]
        micro = self._micro_size(rows)
        batch = self._pad_rows(batch, micro)
        rows = batch.tokens.shape[0]
        norms = self._norms(batch)
        params, rest = self._split()
        with_ref = kind == "rl" and self._ref_params is not None and batch.ref_logprobs is None

        def put(part: TrainBatch) -> TrainBatch:
            part = self._put(part)
            if with_ref:  # the frozen reference's log-probs for the KL term (no gradient, not donated)
                part = part.replace(ref_logprobs=self._logp(self._ref_params, rest, part))
            return part

        with self._context():
            if rows == micro:
                params, self.opt_state, metrics, grad_norm = self._fused(
                    params, rest, self.opt_state, put(batch), norms, kind=kind
                )
                all_metrics = [metrics]
            else:
                acc, all_metrics = None, []
                for start in range(0, rows, micro):
                    part = batch.rows(start, start + micro)
                    if acc is not None and not _host(part.loss_mask).any():
                        continue  # only padding rows (to a batch bucket): no gradient, no metrics
                    acc, metrics = self._micro(params, rest, acc, put(part), norms, kind)
                    all_metrics.append(metrics)
                params, self.opt_state, grad_norm = self._apply(params, self.opt_state, acc)
        nnx.update(self.model, params)
        out = _combine(jax.device_get(all_metrics))
        mask, roles = _host(batch.loss_mask), _host(batch.roles)
        out.update(grad_norm=float(grad_norm), lr=self.learning_rate, tokens=float(mask.sum()), rows=float(rows))
        if kind == "rl":
            for role, name in self.role_names.items():
                out[f"{name}/tokens"] = float(mask[roles == role].sum())
        self.step += 1
        out["step"] = float(self.step)
        return out

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer update of the clipped policy-gradient loss over the whole batch; returns metrics
        (with `kl`, the k3 KL to the reference per trained token, when kl_coef > 0 or the batch has
        `ref_logprobs`)."""
        return self._run(batch, "rl")

    def sft_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer update of masked cross-entropy on `loss_mask` tokens (the warm start)."""
        return self._run(batch, "sft")

    def logprobs(self, batch: TrainBatch, *, model: nnx.Module | None = None) -> jax.Array:
        """Per-token log-probs [N, L] (aligned with tokens, 0 at segment starts) under the current params,
        or under `model` (e.g. a frozen reference with the same architecture); use as `old_logprobs` /
        `ref_logprobs`."""
        if model is None:
            params, rest = self._split()
        else:
            _, params, rest = nnx.split(model, nnx.Param, ...)
        rows = batch.tokens.shape[0]
        micro = self._micro_size(rows)
        padded = self._pad_rows(batch, micro)
        with self._context():
            parts = [
                self._logp(params, rest, self._put(padded.rows(s, s + micro)))
                for s in range(0, padded.tokens.shape[0], micro)
            ]
        return jnp.concatenate(parts, axis=0)[:rows]


def _combine(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Adds micro-batch metrics (each already divided by the full-batch token count); max for `*_max` keys."""
    out: dict[str, float] = {}
    for m in metrics:
        for k, v in m.items():
            v = float(v)
            out[k] = max(out.get(k, v), v) if k.endswith("_max") else out.get(k, 0.0) + v
    return out
