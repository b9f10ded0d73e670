"""Qwen3-MoE against the `transformers` reference (Qwen3MoeForCausalLM, float32, CPU) on tiny random configs:
logits parity unsharded and on 8 simulated devices with an expert axis (plus a sharded learner step against the
unsharded one), the KV-cache and single-token decode paths, HF export -> `from_pretrained`, and HF save -> import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from spade_jax.model.config import ModelConfig  # noqa: E402
from spade_jax.model.hf_io import load_hf_dir, params_from_hf_state_dict, save_hf_dir  # noqa: E402
from spade_jax.model.transformer import KVCache  # noqa: E402

TOL = 1e-4
VOCAB = 96
_BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=112,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    num_experts=8,
    moe_intermediate_size=32,
)
CASES = {  # layers 0 and 2 sparse, 1 dense; and every second layer sparse, top-3 un-normalised
    "norm-topk2-mlp-only": dict(num_hidden_layers=3, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1]),
    "topk3-sparse-step2": dict(
        num_hidden_layers=2, num_experts_per_tok=3, decoder_sparse_step=2, tie_word_embeddings=True
    ),
}


def _hf_model(case: str, seed: int = 0):
    """A random Qwen3MoeForCausalLM; every tensor (norm scales, router, experts) redrawn so nothing is trivial."""
    hf_cfg = transformers.Qwen3MoeConfig(**_BASE, **CASES[case])
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg).eval().float()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, p.shape).astype(np.float32)))
            else:
                p.copy_(torch.from_numpy(rng.normal(0.0, 0.15, p.shape).astype(np.float32)))
    return model


def _hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.float().numpy()


def _tokens(b: int = 3, t: int = 11, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (b, t)).astype(np.int64)


_forward = nnx.jit(lambda model, tokens: model(tokens)[0])


def _logits(model, tokens: np.ndarray) -> np.ndarray:
    return np.asarray(_forward(model, jnp.asarray(tokens, jnp.int32)))


@pytest.fixture(scope="module", params=list(CASES))
def pair(request):
    """(case, HF model, our config, our model loaded from the HF in-memory state dict, HF logits on _tokens())."""
    hf = _hf_model(request.param)
    cfg = ModelConfig.from_hf(hf.config.to_dict())
    ours = params_from_hf_state_dict(cfg, {k: v.numpy() for k, v in hf.state_dict().items()})
    return request.param, hf, cfg, ours, _hf_logits(hf, _tokens())


def _first_case(pair) -> None:
    if pair[0] != next(iter(CASES)):
        pytest.skip("run on the first config only (time)")


def test_config_and_param_count_match_transformers(pair) -> None:
    case, hf, cfg, ours, _ = pair
    assert cfg.arch == "qwen3_moe" and cfg.qk_norm
    want = CASES[case]
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (8, want["num_experts_per_tok"], 32)
    sparse = [i for i in range(cfg.num_layers) if cfg.is_moe_layer(i)]
    hf_sparse = [i for i, layer in enumerate(hf.model.layers) if type(layer.mlp).__name__ == "Qwen3MoeSparseMoeBlock"]
    assert sparse == hf_sparse and sparse  # the HF rule for which layers are sparse
    assert cfg.num_params == sum(p.numel() for p in hf.parameters())


def test_logits_match_transformers(pair) -> None:
    case, _, _, ours, ref = pair
    got = _logits(ours, _tokens())
    diff = float(np.abs(got - ref).max())
    print(f"{case}: max |logit diff| = {diff:.2e} (logit scale {np.abs(ref).max():.1f})")
    assert diff <= TOL


def test_cache_and_single_token_decode_paths(pair) -> None:
    """Prefill + per-token decode through the KV cache, and the model's one-token `decode`, reproduce the full
    pass."""
    _first_case(pair)
    _, _, cfg, ours, ref = pair
    tokens = jnp.asarray(_tokens(), jnp.int32)
    b, t = tokens.shape
    cache = KVCache.zeros(cfg, b, t)
    run = nnx.jit(lambda m, tok, c, i: m(tok, cache=c, cache_index=i))
    pre, cache = run(ours, tokens[:, :6], cache, jnp.int32(0))
    outs = [np.asarray(pre)]
    for i in range(6, t):
        step, cache = run(ours, tokens[:, i : i + 1], cache, jnp.int32(i))
        outs.append(np.asarray(step))
    assert float(np.abs(np.concatenate(outs, axis=1) - ref).max()) <= TOL

    dcache = KVCache.zeros(cfg, b, t)
    step_fn = nnx.jit(lambda m, tok, pos, c, slot: m.decode(tok, pos, c, slot, jnp.zeros((b,), jnp.int32)))
    rows = []
    for i in range(t):
        logits, dcache = step_fn(ours, tokens[:, i], jnp.full((b,), i, jnp.int32), dcache, jnp.int32(i))
        rows.append(np.asarray(logits))
    assert float(np.abs(np.stack(rows, axis=1) - ref).max()) <= TOL


def test_routing_gradient_flows_to_router_and_experts(pair) -> None:
    """The grouped matmul is differentiable: every expert kernel and the router get non-zero gradients."""
    _first_case(pair)
    _, _, cfg, ours, _ = pair
    tokens = jnp.asarray(_tokens(4, 16, seed=3), jnp.int32)
    grads = nnx.jit(nnx.grad(lambda m: jnp.mean(m(tokens)[0] ** 2)))(ours)
    layer = next(i for i in range(cfg.num_layers) if cfg.is_moe_layer(i))
    g = grads.layers[layer].mlp
    assert float(jnp.abs(g.gate.kernel[...]).max()) > 0
    per_expert = jnp.abs(g.experts.gate_proj[...]).sum(axis=(1, 2))
    assert int((per_expert > 0).sum()) >= cfg.num_experts // 2  # the experts that were routed to


def test_export_loads_in_transformers(pair, tmp_path: Path) -> None:
    _, _, cfg, ours, _ = pair
    out = save_hf_dir(ours, cfg, tmp_path / "export")
    names = set(json.loads((out / "config.json").read_text()))
    assert {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"} <= names
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval().float()
    assert type(loaded).__name__ == "Qwen3MoeForCausalLM"
    tokens = _tokens()
    diff = float(np.abs(_hf_logits(loaded, tokens) - _logits(ours, tokens)).max())
    print(f"export -> from_pretrained: max |logit diff| = {diff:.2e}")
    assert diff <= TOL


def test_hf_save_pretrained_imports(pair, tmp_path: Path) -> None:
    """save_pretrained writes one tensor per expert (`mlp.experts.<j>.gate_proj.weight`); our import stacks them."""
    _, hf, _, _, ref = pair
    hf.save_pretrained(tmp_path / "hf")
    cfg, ours = load_hf_dir(tmp_path / "hf")
    assert cfg.arch == "qwen3_moe"
    diff = float(np.abs(_logits(ours, _tokens()) - ref).max())
    print(f"save_pretrained -> load_hf_dir: max |logit diff| = {diff:.2e}")
    assert diff <= TOL


def test_missing_or_misshaped_expert_tensor_is_named(pair) -> None:
    _first_case(pair)
    _, hf, cfg, _, _ = pair
    tensors = {k: v.numpy() for k, v in hf.state_dict().items()}
    fused = "model.layers.2.mlp.experts.gate_up_proj"
    with pytest.raises(ValueError, match=r"model\.layers\.2\.mlp\.experts\.0\.gate_proj\.weight missing"):
        params_from_hf_state_dict(cfg, {k: v for k, v in tensors.items() if k != fused})
    with pytest.raises(ValueError, match=f"tensor {fused}: shape"):
        params_from_hf_state_dict(cfg, {**tensors, fused: tensors[fused][:, :-1]})


def test_config_round_trip_and_validation() -> None:
    cfg = ModelConfig(
        arch="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, mlp_only_layers=[0],
        qk_norm=True,
    )  # fmt: skip
    assert cfg.mlp_only_layers == (0,)
    hf = cfg.to_hf()
    assert hf["model_type"] == "qwen3_moe" and hf["architectures"] == ["Qwen3MoeForCausalLM"]
    assert ModelConfig.from_hf(hf) == cfg
    saved = {k: v for k, v in hf.items() if k != "num_experts"} | {"num_local_experts": 4}  # transformers 5 save
    assert ModelConfig.from_hf(saved).num_experts == 4
    with pytest.raises(ValueError, match="num_experts_per_tok <= num_experts"):
        ModelConfig(arch="qwen3_moe", num_experts=2, num_experts_per_tok=3, moe_intermediate_size=8)


def test_presets_qwen3_30b_a3b() -> None:
    from spade_jax.model.presets import load_preset

    for name in ("qwen3-30b-a3b", "qwen3-30b-a3b-instruct-2507"):
        cfg = load_preset(name).model
        assert cfg.arch == "qwen3_moe" and cfg.num_experts == 128 and cfg.num_experts_per_tok == 8
        # Qwen's model card: 30.5B parameters in total, 3.3B activated
        assert abs(cfg.num_params / 1e9 - 30.5) < 0.1
        e, f = cfg.hidden_size, cfg.moe_intermediate_size
        active = cfg.num_params - cfg.num_layers * (cfg.num_experts - cfg.num_experts_per_tok) * 3 * e * f
        assert abs(active / 1e9 - 3.3) < 0.1


# ------------------------------------------------------------------ 8 simulated devices, expert axis > 1

MESHES = {"fsdp2-expert2-tensor2": {"fsdp": 2, "expert": 2, "tensor": 2}}
# AdamW with eps = 1 and no decay: the first step moves each weight by lr * g / (|g| + 1), smooth in the gradient
# (with a tiny eps it is lr * sign(g), which turns float noise in near-zero gradients into full-size differences)
# (remat on, as in the paper presets: the expert-parallel shard_map is rematerialised in the backward pass)
LEARNER = dict(lr=1.0, eps=1.0, weight_decay=0.0, remat=True, donate=False, compute_entropy=False)


def _worker(data_dir: str) -> None:
    """Runs in the 8-device subprocess: sharded forward and learner step against the unsharded ones."""
    from flax import nnx

    from spade_jax.model import placement as P
    from spade_jax.model import sharding as S
    from spade_jax.model.hf_io import params_from_hf_state_dict
    from spade_jax.rl.batch import Sample, pack_sequences
    from spade_jax.rl.learner import Learner, LearnerConfig

    d = Path(data_dir)
    cfg = ModelConfig.from_hf(json.loads((d / "config.json").read_text()))
    tensors = dict(np.load(d / "tensors.npz"))
    tokens = np.load(d / "tokens.npy").astype(np.int32)
    ref_logits = np.load(d / "logits.npy")
    rng = np.random.default_rng(0)
    samples = [
        Sample(list(rng.integers(0, VOCAB, 5)), list(rng.integers(0, VOCAB, 7)), advantage=float(a))
        for a in (1.0, -0.5, 0.25, -1.0, 0.5, -0.25, 2.0, -2.0)
    ]
    batch = pack_sequences(samples, length_buckets=(16,), batch_buckets=(8,), pack=False)
    lcfg = LearnerConfig(**LEARNER)

    def train(model, mesh):
        learner = Learner(model, lcfg, mesh=mesh)
        metrics = learner.train_step(batch)
        flat = nnx.to_flat_state(nnx.state(learner.model, nnx.Param))
        return metrics, {".".join(map(str, p)): np.asarray(v[...]) for p, v in flat}

    base, base_params = train(params_from_hf_state_dict(cfg, tensors), None)
    results = {"n_devices": jax.device_count()}
    for name, shape in MESHES.items():
        mesh = S.make_mesh(shape)
        model = params_from_hf_state_dict(cfg, tensors, mesh=mesh)
        w = model.layers[0].mlp.experts.gate_proj[...]
        r = {
            "expert_spec": [list(a) if isinstance(a, tuple) else a for a in w.sharding.spec],
            "expert_shard": list(w.addressable_shards[0].data.shape),
        }
        r["forward_diff"] = float(np.abs(np.asarray(P.sharded_forward(model, mesh)(tokens)) - ref_logits).max())
        metrics, params = train(model, mesh)
        r["loss_diff"] = abs(metrics["loss"] - base["loss"])
        r["grad_norm_rel_diff"] = abs(metrics["grad_norm"] / base["grad_norm"] - 1)
        r["param_diff"] = max(float(np.abs(params[k] - base_params[k]).max()) for k in base_params)
        r["moved"] = max(float(np.abs(base_params[k] - _orig(tensors, k)).max()) for k in base_params if "experts" in k)
        results[name] = r
    print("RESULTS " + json.dumps(results))


def _orig(tensors: dict, key: str) -> np.ndarray:
    """Our stacked expert kernel `key` rebuilt from the fused HF tensors (to see that the step changed it)."""
    layer = key.split(".")[1]
    proj = key.split(".")[-1]
    if proj == "down_proj":
        return tensors[f"model.layers.{layer}.mlp.experts.down_proj"].transpose(0, 2, 1)
    gate_up = tensors[f"model.layers.{layer}.mlp.experts.gate_up_proj"]
    half = gate_up.shape[1] // 2
    part = gate_up[:, :half] if proj == "gate_proj" else gate_up[:, half:]
    return part.transpose(0, 2, 1)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> dict:
    hf = _hf_model("norm-topk2-mlp-only", seed=2)
    d = tmp_path_factory.mktemp("moe_sharded")
    (d / "config.json").write_text(json.dumps(ModelConfig.from_hf(hf.config.to_dict()).to_hf()))
    np.savez(d / "tensors.npz", **{k: v.numpy() for k, v in hf.state_dict().items()})
    tokens = _tokens(8, 12, seed=5)
    np.save(d / "tokens.npy", tokens)
    np.save(d / "logits.npy", _hf_logits(hf, tokens))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", str(d)], env=env, capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert proc.returncode == 0 and line, f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(line[len("RESULTS ") :])


@pytest.mark.slow
@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_sharded_moe_matches_transformers_and_unsharded_step(sharded: dict, mesh_name: str) -> None:
    assert sharded["n_devices"] == 8
    r = sharded[mesh_name]
    sizes = MESHES[mesh_name]
    print(f"{mesh_name}: forward vs transformers {r['forward_diff']:.2e}, step loss {r['loss_diff']:.2e}, "
          f"grad norm (rel) {r['grad_norm_rel_diff']:.2e}, params {r['param_diff']:.2e} "
          f"(moved {r['moved']:.2e})")  # fmt: skip
    assert r["expert_spec"] == ["expert", "fsdp", "tensor"]  # experts split over the expert axis, FSDP + TP inside
    assert r["expert_shard"] == [8 // sizes["expert"], 64 // sizes["fsdp"], 32 // sizes["tensor"]]
    assert r["forward_diff"] <= TOL
    assert r["loss_diff"] <= 1e-5 and r["grad_norm_rel_diff"] <= 1e-5
    assert r["param_diff"] <= 1e-5
    assert r["moved"] > 1e-3  # the step really changed the expert weights


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker(sys.argv[sys.argv.index("--worker") + 1])
