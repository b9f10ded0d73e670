"""Orbax checkpoint of sharded params (8 simulated CPU devices, in a subprocess): restore gives bit-identical
arrays in the same shardings; restoring onto another mesh or a single device reshards; a wrong config fails; a
checkpoint in the per-layer block layout (what the code wrote before blocks were stacked) restores into the
stacked model, and a stacked one into a per-layer model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _worker(tmp: str) -> None:
    import jax
    import numpy as np
    from flax import nnx

    from spade_jax.model.checkpoint import restore_params, save_params
    from spade_jax.model.config import ModelConfig
    from spade_jax.model.placement import create_sharded
    from spade_jax.model.sharding import make_mesh

    cfg = ModelConfig(
        arch="qwen2", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, tie_embeddings=False, qkv_bias=True, param_dtype="bfloat16",
    )  # fmt: skip
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    model = create_sharded(cfg, mesh, 11)
    path = save_params(model, os.path.join(tmp, "ckpt"))

    def flat(m) -> dict:
        return {".".join(map(str, p)): v[...] for p, v in nnx.to_flat_state(nnx.state(m))}

    before = flat(model)
    out: dict = {"n_params": len(before)}

    same = flat(restore_params(path, cfg, mesh=mesh))
    out["same_mesh"] = {
        "identical": all(np.array_equal(np.asarray(before[k]), np.asarray(same[k])) for k in before),
        "same_sharding": all(before[k].sharding == same[k].sharding for k in before),
        "dtypes": sorted({str(a.dtype) for a in same.values()}),
        "sharded": sum(any(s is not None for s in a.sharding.spec) for a in same.values()),
    }
    other_mesh = make_mesh({"fsdp": 4, "tensor": 2})
    other = flat(restore_params(path, cfg, mesh=other_mesh))
    out["other_mesh"] = {
        "identical": all(np.array_equal(np.asarray(before[k]), np.asarray(other[k])) for k in before),
        "on_other_mesh": all(a.sharding.mesh == other_mesh for a in other.values()),
    }
    single = flat(restore_params(path, cfg))
    out["single"] = {
        "identical": all(np.array_equal(np.asarray(before[k]), np.asarray(single[k])) for k in before),
        "one_device": all(len(a.sharding.device_set) == 1 for a in single.values()),
    }
    try:
        restore_params(path, cfg.replace(intermediate_size=96), mesh=mesh)
        out["mismatch_error"] = None
    except ValueError as e:
        out["mismatch_error"] = str(e)
    # the per-layer layout: a model that keeps one module per layer writes it, as every checkpoint did before
    flat_cfg = cfg.replace(scan_layers=False)
    old_path = save_params(create_sharded(flat_cfg, mesh, 11), os.path.join(tmp, "per-layer"))
    restored = restore_params(old_path, cfg, mesh=mesh)
    got = flat(restored)
    out["old_layout"] = {
        "stacked": restored.scanned,
        "identical": all(np.array_equal(np.asarray(before[k]), np.asarray(got[k])) for k in before),
        "same_sharding": all(before[k].sharding == got[k].sharding for k in before),
        "q_spec": [
            a if a is None or isinstance(a, str) else list(a) for a in got["layers.attn.q_proj.kernel"].sharding.spec
        ],  # fmt: skip
    }
    per_layer = restore_params(path, flat_cfg, mesh=mesh)
    out["to_per_layer"] = {
        "stacked": per_layer.scanned,
        "identical": all(
            np.array_equal(np.asarray(before[f"layers.{k}"])[i], np.asarray(v[...]))
            for (i, *rest), v in nnx.to_flat_state(nnx.state(per_layer.layers))
            for k in [".".join(map(str, rest))]
        ),  # fmt: skip
    }
    try:
        save_params(model, path)
        out["overwrite_error"] = None
    except FileExistsError as e:
        out["overwrite_error"] = str(e)
    out["devices"] = jax.device_count()
    print("RESULTS " + json.dumps(out))


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    tmp = str(tmp_path_factory.mktemp("ckpt"))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", tmp], env=env, capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert proc.returncode == 0 and line, f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(line[len("RESULTS ") :])


def test_restore_same_mesh_is_identical_and_same_shardings(results: dict) -> None:
    assert results["devices"] == 8
    r = results["same_mesh"]
    assert r["identical"] and r["same_sharding"]
    assert r["dtypes"] == ["bfloat16"]
    assert r["sharded"] == 10 + 2  # stacked block params q,k,v kernel+bias, o, 3 mlp; + embed, lm_head (norms not)


def test_restore_reshards_onto_other_mesh_and_single_device(results: dict) -> None:
    assert results["other_mesh"] == {"identical": True, "on_other_mesh": True}
    assert results["single"] == {"identical": True, "one_device": True}


def test_wrong_config_and_overwrite_fail_clearly(results: dict) -> None:
    msg = results["mismatch_error"]
    assert msg and "\n" not in msg and "down_proj.kernel" in msg and "(2, 128, 64)" in msg
    assert results["overwrite_error"] and "already exists" in results["overwrite_error"]


def test_per_layer_checkpoints_restore_into_the_stacked_model_and_back(results: dict) -> None:
    r = results["old_layout"]
    assert r["stacked"] and r["identical"] and r["same_sharding"]
    assert r["q_spec"] == [None, "fsdp", "tensor"]  # the layer axis unsplit, embed over fsdp, heads over tensor
    assert results["to_per_layer"] == {"stacked": False, "identical": True}


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker(sys.argv[sys.argv.index("--worker") + 1])
