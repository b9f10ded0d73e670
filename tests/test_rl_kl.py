"""The KL term (kl_coef > 0): a frozen reference the learner holds and uses itself, checked against an
independent k3 computation, pulling the policy back, surviving a checkpoint, and absent with kl_coef = 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from spade_jax.model.layer_stack import unstack_state
from spade_jax.rl.batch import pack_sequences
from spade_jax.rl.learner import Learner, LearnerConfig
from spade_jax.rundir.checkpoints import Checkpointer
from spade_jax.trajectory import ROLE_NAMES
from tests.test_rl_learner import _model, _params, _samples


def _batch(zero_adv: bool = False, seed: int = 1):
    batch = pack_sequences(_samples(8, seed=seed), length_buckets=(16,), batch_buckets=(4,))
    if zero_adv:
        batch = batch.replace(advantages=np.zeros_like(batch.advantages))
    return batch


def _perturb(model, scale: float = 0.05, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    params = nnx.state(model, nnx.Param)
    moved = jax.tree.map(lambda x: x + jnp.asarray(rng.normal(0, scale, x.shape), x.dtype), params)
    nnx.update(model, moved)


def _distance(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return float(sum(np.sum((x - y) ** 2) for x, y in zip(a, b)))


def test_kl_pulls_the_policy_back_to_the_reference():
    """Zero advantages leave only the KL term: its metric is there, the loss is kl_coef * kl, and the params
    move back toward the policy the learner was built with: each step lowers the KL (before the fix: no `kl`,
    a zero loss, and the params did not move)."""
    model = _model()
    learner = Learner(model, LearnerConfig(lr=3e-3, weight_decay=0.0, kl_coef=0.5), role_names=ROLE_NAMES)
    _perturb(model)
    batch = _batch(zero_adv=True)
    start, kls = _params(model), []
    for _ in range(4):
        m = learner.train_step(batch)
        assert "kl" in m and "agent/kl" in m and "designer/kl" in m
        assert m["loss"] == pytest.approx(0.5 * m["kl"], rel=1e-5)
        kls.append(m["kl"])  # at the params before this step's update
    assert kls[0] > 1e-3
    assert all(b < a for a, b in zip(kls, kls[1:])) and kls[-1] < 0.9 * kls[0], kls
    assert _distance(_params(model), start) > 0


def test_kl_coef_zero_stores_no_reference():
    learner = Learner(_model(), LearnerConfig(lr=1e-3))
    assert not learner.has_reference and "ref_params" not in learner.get_state()
    learner.freeze_reference()
    assert not learner.has_reference
    m = learner.train_step(_batch())
    assert "kl" not in m


def _logprobs_np(params_np: list[np.ndarray], samples) -> list[np.ndarray]:
    """log p(token t | tokens < t) per sample, each alone in its own row, from a separate model's forward (one
    module per layer, unscanned: `params_np` are in that layout)."""
    model = _model(seed=7, scan_layers=False)  # other init, overwritten below
    state = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.unflatten(jax.tree.structure(state), [jnp.asarray(p) for p in params_np]))
    length = max(len(s) for s in samples)
    rows = np.zeros((len(samples), length), np.int32)
    for i, s in enumerate(samples):
        rows[i, : len(s)] = list(s.prompt_ids) + list(s.completion_ids)
    logits, _ = model(jnp.asarray(rows))
    logits = np.asarray(logits, np.float64)
    logits -= logits.max(axis=-1, keepdims=True)
    logsm = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return [logsm[i, np.arange(len(s) - 1), rows[i, 1 : len(s)]] for i, s in enumerate(samples)]


def test_kl_metric_matches_numpy_k3_against_a_separate_forward():
    samples = _samples(8, seed=3)
    batch = pack_sequences(samples, length_buckets=(16,), batch_buckets=(4,))
    model = _model()
    lcfg = LearnerConfig(lr=1e-2, kl_coef=0.1, micro_batch_size=2, logits_chunk=5)
    learner = Learner(model, lcfg, role_names=ROLE_NAMES)
    ref_np = _params(model)
    first = learner.train_step(batch)  # moves the policy away from the reference
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # the first step starts at the reference
    policy_np = _params(model)
    assert _distance(policy_np, ref_np) > 0
    m = learner.train_step(batch)

    ref_lp, pol_lp = _logprobs_np(ref_np, samples), _logprobs_np(policy_np, samples)
    total, per_role = 0.0, {0: 0.0, 1: 0.0}
    tokens = {0: 0.0, 1: 0.0}
    for s, r, p in zip(samples, ref_lp, pol_lp):
        mask = np.concatenate([np.zeros(len(s.prompt_ids)), np.asarray(s.completion_mask, float)])[1:]
        d = r - p
        k3 = np.exp(d) - d - 1.0
        total += float((k3 * mask).sum())
        per_role[s.role] += float((k3 * mask).sum())
        tokens[s.role] += float(mask.sum())
    n = sum(tokens.values())
    assert n == float(batch.loss_mask.sum())
    assert m["kl"] > 1e-6
    assert m["kl"] == pytest.approx(total / n, rel=2e-3)
    assert m["agent/kl"] == pytest.approx(per_role[0] / tokens[0], rel=2e-3)
    assert m["designer/kl"] == pytest.approx(per_role[1] / tokens[1], rel=2e-3)


def test_freeze_reference_copies_and_survives_donation():
    model = _model()
    learner = Learner(model, LearnerConfig(lr=1e-2, kl_coef=0.1))
    learner.train_step(_batch())
    learner.freeze_reference()  # e.g. after a warm start: the reference is the policy RL starts from
    ref_state = learner.get_state()["ref_params"]
    ref = jax.tree.leaves(ref_state)
    ref_layers = jax.tree.leaves(unstack_state(ref_state))  # the layout `_params` compares in
    np.testing.assert_array_equal(np.concatenate([x.ravel() for x in _params(model)]),
                                  np.concatenate([np.asarray(x).ravel() for x in ref_layers]))  # fmt: skip
    m = learner.train_step(_batch())  # donates the policy's arrays, never the reference's
    assert m["kl"] == pytest.approx(0.0, abs=1e-9)
    assert not any(x.is_deleted() for x in ref)
    assert learner.train_step(_batch())["kl"] > 0


def test_set_aside_frees_the_moments_and_fresh_optimizer_starts_anew():
    """What the warm start does around its own SFT learner: the RL learner lets go of its Adam moments and
    reference, then makes them as a new learner makes them, the reference at the params the SFT learner left; the
    next step is the step a new learner would take from there."""
    model = _model()
    learner = Learner(model, LearnerConfig(lr=1e-2, kl_coef=0.1))
    learner.train_step(_batch())
    learner.set_aside()
    assert learner.opt_state is None and not learner.has_reference
    _perturb(model, seed=3)  # what the SFT learner does meanwhile
    learner.fresh_optimizer()
    twin_model = _model()
    nnx.update(twin_model, jax.tree.map(lambda x: jnp.array(x, copy=True), nnx.state(model)))  # not aliased
    twin = Learner(twin_model, LearnerConfig(lr=1e-2, kl_coef=0.1))
    for a, b in zip(jax.tree.leaves(learner.opt_state), jax.tree.leaves(twin.opt_state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # zero moments, count 0
    assert learner.has_reference
    ma, mb = learner.train_step(_batch()), twin.train_step(_batch())
    assert ma["kl"] == pytest.approx(0.0, abs=1e-9) and ma["loss"] == pytest.approx(mb["loss"], rel=1e-6)
    flat = lambda m: np.concatenate([x.ravel() for x in _params(m)])  # noqa: E731
    np.testing.assert_allclose(flat(model), flat(twin_model), rtol=1e-6, atol=1e-7)


def test_reference_survives_a_checkpoint(tmp_path):
    cfg = LearnerConfig(lr=1e-2, kl_coef=0.1, micro_batch_size=2)
    batch = _batch()
    a = Learner(_model(0), cfg)
    a.train_step(batch)
    state = a.get_state()
    assert set(state) == {"params", "opt_state", "step", "ref_params"}
    ckpt = Checkpointer(tmp_path / "ck", async_save=False)
    ckpt.save(1, {k: v for k, v in state.items() if k != "step"}, {"learner_step": state["step"]}, wait=True)

    b = Learner(_model(5), cfg)  # another init: its own reference differs
    templates = {k: v for k, v in b.get_state().items() if k != "step"}
    trees, meta = ckpt.restore(None, templates)
    ckpt.close()
    b.set_state({**trees, "step": meta["learner_step"]})
    ma, mb = a.train_step(batch), b.train_step(batch)
    assert ma["kl"] > 0 and mb["kl"] == pytest.approx(ma["kl"], rel=1e-6)
    for x, y in zip(_params(a.model), _params(b.model)):
        np.testing.assert_allclose(x, y, atol=1e-7)


_MESH_SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np
    import tests.test_rl_kl as T
    from spade_jax.model.sharding import make_mesh
    from spade_jax.rl.learner import Learner, LearnerConfig
    assert jax.device_count() == 2
    batch = T._batch()
    cfg = LearnerConfig(lr=1e-2, kl_coef=0.1)
    single = Learner(T._model(), cfg)
    sharded = Learner(T._model(), cfg, mesh=make_mesh({"fsdp": 2}))
    for _ in range(2):
        a, b = single.train_step(batch), sharded.train_step(batch)
        assert abs(a["kl"] - b["kl"]) < 1e-6 * max(1.0, a["kl"]) + 1e-9, (a["kl"], b["kl"])
    state = sharded.get_state()
    got = [x.sharding for x in jax.tree.leaves(state["ref_params"])]
    want = [x.sharding for x in jax.tree.leaves(state["params"])]
    assert got == want and any(len(g.spec) for g in got)
    print("MESH_OK")
    """
)


@pytest.mark.slow
def test_reference_is_sharded_like_the_policy_on_a_mesh():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", _MESH_SCRIPT], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert "MESH_OK" in proc.stdout, proc.stderr[-3000:]
