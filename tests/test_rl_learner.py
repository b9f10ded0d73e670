"""The learner: one step against a PyTorch/transformers reference, accumulation and remat equivalence,
packed log-probs against unpacked model calls, bounded compiles, and a 2-device mesh (subprocess)."""

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

from spade_jax.model.config import ModelConfig
from spade_jax.model.layer_stack import unstack_state
from spade_jax.model.transformer import Transformer
from spade_jax.rl.batch import Sample, pack_sequences
from spade_jax.rl.learner import Learner, LearnerConfig
from spade_jax.trajectory import ROLE_NAMES

CFG = ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, rms_norm_eps=1e-6)  # fmt: skip


def _model(seed: int = 0, **overrides) -> Transformer:
    return Transformer(CFG.replace(**overrides), rngs=nnx.Rngs(seed))


def _samples(n: int = 6, seed: int = 0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c = int(rng.integers(2, 7))
        out.append(
            Sample(
                prompt_ids=rng.integers(1, 40, size=int(rng.integers(1, 5))).tolist(),
                completion_ids=rng.integers(1, 40, size=c).tolist(),
                completion_mask=(rng.random(c) < 0.8).astype(int).tolist(),
                logprobs=(-rng.random(c) * 3).tolist(),
                advantage=float(rng.normal()),
                role=i % 2,
            )
        )
    return out


def _params(model) -> list[np.ndarray]:
    """The parameters in the per-layer layout (a stacked model's unstacked), so both layouts compare leaf by leaf."""
    return [np.asarray(x) for x in jax.tree.leaves(unstack_state(nnx.state(model, nnx.Param)))]


def test_packed_logprobs_equal_unpacked_model_calls():
    model = _model()
    samples = _samples(8)
    batch = pack_sequences(samples, length_buckets=(16,), batch_buckets=(4,))
    assert (batch.segment_ids.max(axis=1) > 1).any()  # something is really packed
    learner = Learner(model, LearnerConfig(micro_batch_size=2, logits_chunk=5))
    lp = np.asarray(learner.logprobs(batch))
    # reference: each sample alone in its own row (right padding is invisible to causal attention)
    rows = np.zeros((len(samples), 16), np.int32)
    for i, s in enumerate(samples):
        rows[i, : len(s)] = list(s.prompt_ids) + list(s.completion_ids)
    logits, _ = nnx.jit(lambda m, t: m(t))(model, jnp.asarray(rows))
    want_all = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    for i, s in enumerate(samples):
        want = want_all[i, np.arange(len(s) - 1), rows[i, 1 : len(s)]]
        got = lp[batch.sample_ids == i]
        assert got[0] == 0.0
        np.testing.assert_allclose(got[1:], want, atol=2e-5)


@pytest.mark.slow
def test_accumulation_remat_and_chunking_give_the_same_step():
    """One step of the scanned model, run every way the learner can (accumulation, remat, the flash attention
    loop, vocabulary chunks), equals the unscanned model with the whole attention matrix and whole logits: same
    metrics, same parameters after the update."""
    batch = pack_sequences(_samples(8, seed=1), length_buckets=(16,), batch_buckets=(4,), pack=False)
    batch = batch.replace(old_logprobs=batch.sampler_logprobs + 0.3 * np.sign(batch.advantages))  # make clipping bite
    base = dict(lr=1e-3, kl_coef=0.0)
    configs = {
        "whole": LearnerConfig(**base, micro_batch_size=None, logits_chunk=0, attn_query_chunk=0),
        "accum": LearnerConfig(**base, micro_batch_size=2, logits_chunk=3),
        "remat": LearnerConfig(**base, grad_accum_steps=1, remat=True, remat_policy="dots", logits_chunk=4),
        # the flash loop over 4 blocks of 4 rows, then 16 blocks of 1 row with remat and accumulation
        "qchunk": LearnerConfig(**base, micro_batch_size=None, logits_chunk=0, attn_query_chunk=4),
        "qchunk+remat": LearnerConfig(**base, micro_batch_size=2, remat=True, attn_query_chunk=1),
        # the vocabulary (40) in chunks of 16 (the last overlapping the one before), inside chunks of 5 positions
        "vocab": LearnerConfig(**base, micro_batch_size=None, logits_chunk=5, vocab_chunk=16),
    }
    results = {}
    reference = Learner(_model(scan_layers=False), configs["whole"], role_names=ROLE_NAMES)
    results["unscanned"] = (reference.train_step(batch), _params(reference.model), reference)
    for name, cfg in configs.items():
        learner = Learner(_model(), cfg, role_names=ROLE_NAMES)
        assert learner.model.scanned
        metrics = learner.train_step(batch)
        results[name] = (metrics, _params(learner.model), learner)
    m0, p0, _ = results["unscanned"]
    assert m0["clip_frac_low"] + m0["clip_frac_high"] > 0
    for name in configs:
        m, p, _ = results[name]
        for key in (
            "loss",
            "grad_norm",
            "clip_frac_low",
            "clip_frac_high",
            "entropy",
            "agent/pg_loss",
            "is_weight_max",
        ):
            assert m[key] == pytest.approx(m0[key], rel=1e-4, abs=1e-6), (name, key)
        for a, b in zip(p, p0):
            np.testing.assert_allclose(a, b, atol=1e-6)

    # remat really rematerialises: one remat region in the scan's body (every block), one for the chunked
    # log-softmax; the flash attention loop has its own backward pass and needs none
    for name, want in (("remat", 2), ("whole", 0), ("qchunk", 0)):
        learner = results[name][2]
        params, rest = learner._split()
        traced = learner._fused.trace(params, rest, learner.opt_state, learner._put(batch), learner._norms(batch), "rl")
        assert str(traced.jaxpr).count("remat") == want, name

    # bounded compiles: a batch with twice the rows and the same length reuses the accumulation step
    learner = results["accum"][2]
    before = learner.compile_count
    for n_samples, rows in ((8, 8), (3, 3)):  # 3 rows are padded to 4 (two micro-batches of 2)
        other = pack_sequences(_samples(n_samples, seed=2), length_buckets=(16,), batch_buckets=(rows,), pack=False)
        learner.train_step(other.replace(old_logprobs=other.sampler_logprobs))
        assert learner.compile_count == before
    learner.train_step(other)  # no old_logprobs (fully on-policy): a different pytree, compiled once more
    assert learner.compile_count == before + 2


def _torch_step(hf, opt, batch, kind: str, clip_low=0.2, clip_high=0.28, is_cap=2.0):
    """Our loss definitions, written again in torch on a transformers model (one sequence per row)."""
    import torch

    toks = torch.tensor(np.asarray(batch.tokens), dtype=torch.long)
    att = torch.tensor(np.asarray(batch.segment_ids) > 0, dtype=torch.long)
    logits = hf(input_ids=toks, attention_mask=att).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, toks[:, 1:, None])[..., 0]
    mask = torch.tensor(np.asarray(batch.loss_mask)[:, 1:])
    n = mask.sum().clamp(min=1)
    if kind == "sft":
        loss = -(logp * mask).sum() / n
    else:
        old = torch.tensor(np.asarray(batch.old_logprobs)[:, 1:])
        samp = torch.tensor(np.asarray(batch.sampler_logprobs)[:, 1:])
        adv = torch.tensor(np.asarray(batch.advantages)[:, 1:])
        ratio = torch.exp(logp - old)
        pg = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv)
        w = torch.clamp(torch.exp(old - samp), max=is_cap)
        loss = (w * pg * mask).sum() / n
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def _hf_state(model) -> dict:
    import torch

    t = lambda x: torch.tensor(np.asarray(x))  # noqa: E731
    sd = {
        "model.embed_tokens.weight": t(model.embed_tokens.embedding[...]),
        "model.norm.weight": t(model.norm.scale[...]),
    }
    for i in range(CFG.num_layers):
        layer, pre = model.layer(i), f"model.layers.{i}."
        for n in ("q", "k", "v", "o"):
            sd[pre + f"self_attn.{n}_proj.weight"] = t(getattr(layer.attn, f"{n}_proj").kernel[...].T)
        for n in ("gate", "up", "down"):
            sd[pre + f"mlp.{n}_proj.weight"] = t(getattr(layer.mlp, f"{n}_proj").kernel[...].T)
        sd[pre + "input_layernorm.weight"] = t(layer.input_layernorm.scale[...])
        sd[pre + "post_attention_layernorm.weight"] = t(layer.post_attention_layernorm.scale[...])
    return sd


@pytest.mark.slow
def test_train_and_sft_steps_match_torch_adamw_reference():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = _model(3)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG.to_hf()))
    missing, unexpected = hf.load_state_dict(_hf_state(model), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    hf.tie_weights()
    lr, eps = 1e-3, 1e-4  # a larger eps keeps Adam's first step well conditioned for near-zero gradients
    cfg = LearnerConfig(lr=lr, eps=eps, decay_vectors=True, micro_batch_size=2, logits_chunk=4)
    learner = Learner(model, cfg)
    opt = torch.optim.AdamW(hf.parameters(), lr=lr, betas=cfg.betas, eps=eps, weight_decay=cfg.weight_decay)

    batch = pack_sequences(_samples(4, seed=5), length_buckets=(16,), batch_buckets=(4,), pack=False)
    old = np.asarray(learner.logprobs(batch)) + np.random.default_rng(0).normal(0, 0.3, batch.tokens.shape)
    batch = batch.replace(old_logprobs=old.astype(np.float32))
    m = learner.train_step(batch)
    ref_loss = _torch_step(hf, opt, batch, "rl")
    assert m["loss"] == pytest.approx(ref_loss, rel=1e-4, abs=1e-6)
    m = learner.sft_step(batch)
    ref_loss = _torch_step(hf, opt, batch, "sft")
    assert m["loss"] == pytest.approx(ref_loss, rel=1e-5)

    ours, ref = _hf_state(learner.model), hf.state_dict()
    init = _hf_state(_model(3))
    for name, value in ours.items():
        moved = (ref[name] - init[name]).abs().max().item()
        assert moved > 0.5 * lr, name  # the parameter really changed
        np.testing.assert_allclose(value.numpy(), ref[name].detach().numpy(), atol=2e-3 * lr, err_msg=name)


_MESH_SCRIPT = textwrap.dedent(
    """
    import jax, numpy as np
    from flax import nnx
    import tests.test_rl_learner as T
    from spade_jax.model.sharding import make_mesh, param_shardings
    from spade_jax.rl.batch import pack_sequences
    from spade_jax.rl.learner import Learner, LearnerConfig
    assert jax.device_count() == 2
    batch = pack_sequences(T._samples(8, seed=1), length_buckets=(16,), batch_buckets=(4,), pack=False)
    cfg = LearnerConfig(lr=1e-3)
    single = Learner(T._model(), cfg)
    meshes = {"data": make_mesh({"data": 2}), "fsdp": make_mesh({"fsdp": 2})}
    sharded = {name: Learner(T._model(), cfg, mesh=mesh) for name, mesh in meshes.items()}
    for _ in range(2):
        a = single.train_step(batch)
        for name, learner in sharded.items():
            b = learner.train_step(batch)
            assert abs(a["loss"] - b["loss"]) < 1e-5 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-4, (name, a, b)
    for name, learner in sharded.items():
        for x, y in zip(T._params(single.model), T._params(learner.model)):
            np.testing.assert_allclose(x, y, atol=1e-6)
        params = nnx.state(learner.model, nnx.Param)
        want = jax.tree.leaves(param_shardings(params, meshes[name]))
        got = [x.sharding for x in jax.tree.leaves(params)]
        assert [w.spec for w in want] == [g.spec for g in got], name
        mu = learner.opt_state[1][0].mu  # (clip, adamw(scale_by_adam, ...)): Adam moments follow the params
        assert [x.sharding.spec for x in jax.tree.leaves(mu)] == [g.spec for g in got], name
    assert any(len(g.spec) for g in got)  # fsdp really splits something
    lp = sharded["data"].logprobs(batch)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(single.logprobs(batch)), atol=1e-5)
    print("MESH_OK")
    """
)


@pytest.mark.slow
def test_mesh_sharded_step_matches_single_device():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", _MESH_SCRIPT], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert "MESH_OK" in proc.stdout, proc.stderr[-3000:]
