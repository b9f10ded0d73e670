"""Stacked blocks (`ModelConfig.scanned`): the same network as one module per layer, in every way it runs
(training forward with packed rows, prefill, decode with and without per-layer decode copies, an all-sparse MoE),
conversion between the layouts (round trip; an optimizer-state checkpoint written in the per-layer layout restores
into a stacked learner state), weight decay by a parameter's per-layer rank, sharding of the layer axis, and a
program whose size does not grow with depth."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AbstractMesh

from spade_jax.config.learner import LearnerConfig
from spade_jax.model.config import ModelConfig
from spade_jax.model.kv_cache import KVCache
from spade_jax.model.layer_stack import LayerRelayout, stack_state, unstack_state
from spade_jax.model.sharding import MESH_AXES, param_specs
from spade_jax.model.transformer import ForwardOptions, Transformer
from spade_jax.rl.learner import make_optimizer
from spade_jax.rundir.checkpoints import Checkpointer

CFG = ModelConfig(arch="qwen2", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=3, num_heads=4,
                  num_kv_heads=2, head_dim=8, qkv_bias=True)  # fmt: skip


def _pair(cfg: ModelConfig = CFG, seed: int = 0) -> tuple[Transformer, Transformer]:
    stacked = Transformer(cfg, rngs=nnx.Rngs(seed))
    per_layer = Transformer(cfg.replace(scan_layers=False), rngs=nnx.Rngs(seed))
    assert stacked.scanned and not per_layer.scanned
    return stacked, per_layer


def _same_params(stacked: Transformer, per_layer: Transformer) -> bool:
    a = nnx.to_flat_state(unstack_state(nnx.state(stacked, nnx.Param)))
    b = nnx.to_flat_state(nnx.state(per_layer, nnx.Param))
    return [p for p, _ in a] == [p for p, _ in b] and all(
        np.array_equal(x[...], y[...]) for (_, x), (_, y) in zip(a, b)
    )


def test_a_seed_gives_the_same_weights_in_both_layouts_and_they_convert_exactly():
    stacked, per_layer = _pair()
    assert _same_params(stacked, per_layer)
    assert stacked.layers.attn.q_proj.kernel.shape == (3, 32, 32)
    assert stacked.layers.attn.q_proj.kernel.get_metadata()["logical_axes"] == ("layers", "embed", "q_heads")
    state = nnx.state(per_layer, nnx.Param)
    back = unstack_state(stack_state(state))
    assert all(np.array_equal(x[...], y[...]) for (_, x), (_, y) in
               zip(nnx.to_flat_state(back), nnx.to_flat_state(state)))  # fmt: skip


def test_forward_prefill_and_decode_equal_the_per_layer_model():
    stacked, per_layer = _pair()
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, 64, (2, 12)), jnp.int32)
    seg = jnp.asarray([[1] * 7 + [2] * 5, [1] * 9 + [0] * 3], jnp.int32)
    pos = jnp.asarray([list(range(7)) + list(range(5)), list(range(9)) + [0] * 3], jnp.int32)
    for m in (stacked, per_layer):
        m.set_options(ForwardOptions(remat=True, query_chunk=4))
    fwd = lambda m: nnx.jit(lambda m, t: m(t, pos, segment_ids=seg)[0])(m, tokens)
    live = np.asarray(seg) > 0
    np.testing.assert_allclose(np.asarray(fwd(stacked))[live], np.asarray(fwd(per_layer))[live], atol=1e-5)

    def prefill_and_decode(m, layouts):
        cache = KVCache.zeros(m.cfg, 2, 16)
        logits, cache = m(tokens[:, :8], cache=cache)
        step, _ = m.decode(tokens[:, 8], jnp.full((2,), 8, jnp.int32), cache, 8, jnp.zeros((2,), jnp.int32),
                           layouts=layouts)  # fmt: skip
        return logits, step

    want = nnx.jit(lambda m: prefill_and_decode(m, None))(per_layer)
    for kind in ("own", "layers", "kernels"):
        layouts = None if kind == "own" else stacked.decode_layouts(**{kind: True})
        got = nnx.jit(lambda m, lay: prefill_and_decode(m, lay))(stacked, layouts)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=kind)
    assert stacked.decode_layouts(layers=True).layers[2]["attn"]["q_proj"]["kernel"].shape == (32, 32)


def test_all_sparse_moe_stacks_and_a_mixed_one_does_not():
    moe = dict(arch="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, qk_norm=True,
               vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
               head_dim=8)  # fmt: skip
    assert not ModelConfig(**moe, mlp_only_layers=(1,)).scanned
    stacked, per_layer = _pair(ModelConfig(**moe))
    assert stacked.layers.mlp.experts.gate_proj.shape == (2, 4, 32, 8)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 64, (2, 9)), jnp.int32)
    fwd = nnx.jit(lambda m: m(tokens)[0])
    np.testing.assert_allclose(fwd(stacked), fwd(per_layer), atol=1e-5)


def test_weight_decay_skips_per_layer_vectors_of_a_stacked_model():
    stacked, per_layer = _pair()
    tx = make_optimizer(LearnerConfig(lr=1.0, weight_decay=0.5, grad_clip=0.0))
    decay = jax.jit(lambda p: tx.update(jax.tree.map(jnp.zeros_like, p), tx.init(p), p)[0])  # no gradient: decay alone
    for model in (stacked, per_layer):
        updates = decay(nnx.state(model, nnx.Param))
        flat = dict(nnx.to_flat_state(unstack_state(updates)))
        assert np.abs(flat[("layers", 1, "attn", "q_proj", "kernel")][...]).max() > 0  # a matrix: decayed
        for vector in (("layers", 1, "input_layernorm", "scale"), ("layers", 0, "attn", "k_proj", "bias")):
            assert not np.asarray(flat[vector][...]).any(), vector  # [L, E] when stacked, still a vector per layer


def test_layer_axis_is_never_split():
    abstract = nnx.eval_shape(lambda: Transformer(CFG.replace(hidden_size=64), rngs=nnx.Rngs(0)))
    mesh = AbstractMesh((1, 4, 1, 2), MESH_AXES)  # fsdp=4, tensor=2
    specs = dict(nnx.to_flat_state(param_specs(abstract, mesh)))
    assert tuple(specs[("layers", "attn", "q_proj", "kernel")]) == (None, "fsdp", "tensor")
    assert tuple(specs[("layers", "mlp", "down_proj", "kernel")]) == (None, "tensor", "fsdp")
    assert tuple(specs[("layers", "input_layernorm", "scale")]) == ()


def _count_dots(cfg: ModelConfig) -> int:
    """dot_general ops in the lowered (not compiled) program of a training step's value and gradient."""
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    tokens = jax.ShapeDtypeStruct((2, 16), jnp.int32)

    def loss(st, t):
        m = nnx.merge(graphdef, st)
        m.set_options(ForwardOptions(remat=True))
        return jnp.mean(m(t)[0])

    text = jax.jit(jax.grad(loss)).lower(state, tokens).as_text()
    return len(re.findall(r"stablehlo\.dot_general", text))


def test_program_size_does_not_grow_with_depth():
    shallow, deep = _count_dots(CFG.replace(num_layers=2)), _count_dots(CFG.replace(num_layers=8))
    assert shallow == deep
    unrolled = [_count_dots(CFG.replace(num_layers=n, scan_layers=False)) for n in (2, 8)]
    assert unrolled[1] > 3 * unrolled[0] // 2  # the per-layer model's program grows with every block


def test_optimizer_state_saved_per_layer_restores_into_a_stacked_learner(tmp_path):
    """A run checkpoint written before blocks were stacked (params and AdamW moments, per layer) restores into
    the stacked layout through the run's Checkpointer, every value in its place; and the other way round."""
    stacked, per_layer = _pair(seed=3)
    tx = make_optimizer(LearnerConfig(lr=1e-2))

    def stepped(model):  # params and the AdamW state after one update with the params as gradients
        params = nnx.state(model, nnx.Param)
        return {"params": params, "opt_state": tx.update(params, tx.init(params), params)[1]}

    saver = Checkpointer(tmp_path / "ck", async_save=False)
    saver.save(1, stepped(per_layer), {"step": 1}, wait=True)
    saver.close()
    fresh = Transformer(CFG, rngs=nnx.Rngs(9))
    template = stepped(fresh)
    trees, meta = Checkpointer(tmp_path / "ck", async_save=False, relayout=LayerRelayout()).restore(1, template)
    assert meta == {"step": 1}
    assert jax.tree.structure(trees["opt_state"]) == jax.tree.structure(template["opt_state"])
    for a, b in zip(jax.tree.leaves(trees["opt_state"]), jax.tree.leaves(stepped(stacked)["opt_state"])):
        np.testing.assert_array_equal(a, b)
    nnx.update(fresh, trees["params"])
    assert _same_params(fresh, per_layer)
    with pytest.raises(ValueError):  # without the relayout the layouts do not match
        Checkpointer(tmp_path / "ck", async_save=False).restore(1, template)
