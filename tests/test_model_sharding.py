"""Sharding on 8 simulated CPU devices (run in a subprocess: XLA_FLAGS must be set before JAX starts).

For two mesh shapes: parameters land where the rules say (specs and per-device shard shapes against a
hand-written table), creation / HF loading / shard_model agree with the unsharded model, and the jitted sharded
forward (plain and KV-cache decode) matches the unsharded one. Rule logic is also checked in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

MESHES = {"data2-fsdp2-tensor2": {"data": 2, "fsdp": 2, "tensor": 2}, "fsdp4-tensor2": {"fsdp": 4, "tensor": 2}}
# Hand-written expectation for the worker's config under the default rules: param suffix -> spec.
EXPECTED_SPECS = {
    "embed_tokens.embedding": ["tensor", "fsdp"],
    "q_proj.kernel": ["fsdp", "tensor"],
    "k_proj.kernel": ["fsdp", "tensor"],
    "v_proj.kernel": ["fsdp", "tensor"],
    "o_proj.kernel": ["tensor", "fsdp"],
    "gate_proj.kernel": ["fsdp", "tensor"],
    "up_proj.kernel": ["fsdp", "tensor"],
    "down_proj.kernel": ["tensor", "fsdp"],
    "lm_head.kernel": ["fsdp", "tensor"],
    "scale": [],  # all norms replicated
}


def _worker() -> None:
    """Runs inside the 8-device subprocess; prints one JSON object of measurements."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from spade_jax.model import placement as P
    from spade_jax.model import sharding as S
    from spade_jax.model.config import ModelConfig
    from spade_jax.model.hf_io import hf_state_items, params_from_hf_state_dict
    from spade_jax.model.transformer import KVCache, Transformer

    cfg = ModelConfig(
        arch="qwen3", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, tie_embeddings=False, qk_norm=True,
    )  # fmt: skip
    seed = 5
    ref = Transformer(cfg, rngs=nnx.Rngs(seed))  # unsharded, on device 0
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 128, (8, 12)), jnp.int32)
    ref_logits = np.asarray(ref(tokens)[0])
    ref_params = {".".join(map(str, p)): np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(ref))}
    hf_tensors = {name: np.asarray(t) for name, t in hf_state_items(ref)}  # per layer, HF layout

    def placements(model) -> dict:
        out = {}
        for p, v in nnx.to_flat_state(nnx.state(model)):
            arr = v[...]
            spec = [None if a is None else a for a in arr.sharding.spec]
            out[".".join(map(str, p))] = {
                "spec": spec,
                "shard": list(arr.addressable_shards[0].data.shape),
                "shape": list(arr.shape),
                "devices": len(arr.sharding.device_set),
                "max_diff": float(np.abs(np.asarray(arr, np.float32) - ref_params[".".join(map(str, p))]).max()),
            }
        return out

    results = {"n_devices": jax.device_count()}
    for name, shape in MESHES.items():
        mesh = S.make_mesh(shape)
        r: dict = {"mesh": dict(mesh.shape)}
        created = P.create_sharded(cfg, mesh, seed)
        r["created"] = placements(created)
        loaded = params_from_hf_state_dict(cfg, hf_tensors, mesh=mesh)
        r["loaded"] = placements(loaded)
        moved = P.shard_model(Transformer(cfg, rngs=nnx.Rngs(seed)), mesh)
        r["moved"] = placements(moved)

        forward = P.sharded_forward(loaded, mesh)
        logits = forward(tokens)
        r["logits_spec"] = [list(a) if isinstance(a, tuple) else a for a in logits.sharding.spec]
        r["forward_diff"] = float(np.abs(np.asarray(logits) - ref_logits).max())

        # KV-cache prefill + one decode step under the mesh, jitted with sharded params and cache
        cache_sh = P.kv_cache_shardings(mesh, cfg, 8, 16)
        cache = jax.device_put(KVCache.zeros(cfg, 8, 16), cache_sh)
        step = nnx.jit(lambda m, t, c, i: m(t, cache=c, cache_index=i))
        with jax.set_mesh(mesh):
            pre, cache = step(loaded, tokens[:, :11], cache, jnp.int32(0))
            dec, cache = step(loaded, tokens[:, 11:], cache, jnp.int32(11))
        got = np.concatenate([np.asarray(pre), np.asarray(dec)], axis=1)
        r["cache_diff"] = float(np.abs(got - ref_logits).max())
        r["cache_spec"] = [list(a) if isinstance(a, tuple) else a for a in cache.k[0].sharding.spec]
        results[name] = r
    print("RESULTS " + json.dumps(results))


@pytest.fixture(scope="module")
def results() -> dict:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert proc.returncode == 0 and line, f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(line[len("RESULTS ") :])


def _expected_spec(param: str) -> list:
    """The spec of a parameter; a block's parameters are stacked over the layers (scanned), an axis never split."""
    spec = next(spec for suffix, spec in EXPECTED_SPECS.items() if param.endswith(suffix))
    return [None, *spec] if param.startswith("layers.") else spec


def _trimmed(spec: list) -> list:
    """A spec without trailing Nones (replicated trailing axes may be written either way)."""
    while spec and spec[-1] is None:
        spec = spec[:-1]
    return spec


@pytest.mark.parametrize("mesh_name", list(MESHES))
@pytest.mark.parametrize("how", ["created", "loaded", "moved"])
def test_params_sharded_as_rules_say(results: dict, mesh_name: str, how: str) -> None:
    assert results["n_devices"] == 8
    r = results[mesh_name]
    sizes = {**{"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}, **MESHES[mesh_name]}
    assert r["mesh"] == sizes
    params = r[how]
    # per qwen3 layer: q,k,v,o + q/k norm + 2 norms + 3 mlp, each stacked over the layers; + embed, norm, head
    assert len(params) == 11 + 3
    for name, p in params.items():
        spec = _expected_spec(name)
        assert _trimmed(p["spec"]) == _trimmed(spec), name
        want = [n // (sizes[ax] if ax else 1) for n, ax in zip(p["shape"], spec)] + p["shape"][len(spec) :]
        assert p["shard"] == want, name
        assert p["devices"] == 8
        # created from the same seed / loaded from the same tensors / moved: the values of the unsharded model
        assert p["max_diff"] <= (1e-6 if how == "created" else 0.0), name


@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_sharded_forward_matches_unsharded(results: dict, mesh_name: str) -> None:
    r = results[mesh_name]
    print(f"{mesh_name}: forward {r['forward_diff']:.2e}, cached {r['cache_diff']:.2e}")
    assert r["forward_diff"] <= 1e-5
    assert r["cache_diff"] <= 1e-5
    batch = ["data", "fsdp"] if mesh_name.startswith("data2") else "fsdp"
    assert r["logits_spec"] == [batch, None, "tensor"]  # batch split, vocab over tensor
    assert r["cache_spec"][1] == "tensor"  # kv heads split over tensor (keys [B, kv_heads, head_dim, S])


# ------------------------------------------------------------------ rule logic, in-process (no devices needed)


def test_rules_drop_axes_that_do_not_divide_and_never_reuse_one() -> None:
    from jax.sharding import AbstractMesh, PartitionSpec

    from spade_jax.model.sharding import MESH_AXES, ShardingRules

    mesh = AbstractMesh((2, 4, 1, 2), MESH_AXES)
    rules = ShardingRules()
    assert rules.param_spec(("vocab", "embed"), (100, 64), mesh) == PartitionSpec("tensor", "fsdp")
    assert rules.param_spec(("vocab", "embed"), (99, 64), mesh) == PartitionSpec(None, "fsdp")  # 99 odd
    assert rules.param_spec(("embed", "mlp"), (6, 8), mesh) == PartitionSpec(None, "tensor")  # 6 % 4 != 0
    assert rules.activation_spec(("batch", "length"), (16, 3), mesh) == PartitionSpec(("data", "fsdp"))
    assert rules.activation_spec(("batch", "length"), (4, 3), mesh) == PartitionSpec("data")  # 4 % 8 != 0
    both = rules.replace(params={"mlp": "fsdp"})
    assert both.param_spec(("embed", "mlp"), (8, 8), mesh) == PartitionSpec("fsdp")  # fsdp used once only
    with pytest.raises(ValueError, match="no sharding rule for parameter logical axis 'bogus'"):
        rules.param_spec(("bogus",), (4,), mesh)


def test_make_mesh_validates_shape() -> None:
    from spade_jax.model.sharding import make_mesh

    mesh = make_mesh()
    assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}
    with pytest.raises(ValueError, match="unknown mesh axes"):
        make_mesh({"model": 1})
    with pytest.raises(ValueError, match="needs 2 devices"):
        make_mesh({"data": 2})


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()
