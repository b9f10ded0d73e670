"""HF interop round trips: our params -> save_hf_dir -> transformers.from_pretrained (same logits), and a
transformers-saved directory (single file and sharded index) -> load_hf_dir (same logits); clear load errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402

from spade_jax.model.config import ModelConfig  # noqa: E402
from spade_jax.model.hf_io import load_hf_dir, params_from_hf_state_dict, save_hf_dir  # noqa: E402
from spade_jax.model.safetensors_io import read_safetensors  # noqa: E402
from spade_jax.model.transformer import Transformer  # noqa: E402

TOL = 1e-4
CONFIGS = {
    "llama-tied-llama3-rope": ModelConfig(
        arch="llama",
        vocab_size=80,
        hidden_size=48,
        intermediate_size=96,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=12,
        rope_theta=500000.0,
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=32,
        ),
        rms_norm_eps=1e-5,
        tie_embeddings=True,
        bos_token_id=1,
        eos_token_ids=(2,),
    ),
    "qwen2": ModelConfig(
        arch="qwen2", vocab_size=80, hidden_size=48, intermediate_size=96, num_layers=2, num_heads=6,
        num_kv_heads=2, head_dim=8, rope_theta=1e6, tie_embeddings=False, qkv_bias=True, eos_token_ids=(3, 4),
    ),
    "qwen3": ModelConfig(
        arch="qwen3", vocab_size=80, hidden_size=48, intermediate_size=96, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, rope_theta=1e6, tie_embeddings=False, qk_norm=True,
    ),
}  # fmt: skip


def _random_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """Our model with every parameter redrawn at a scale that makes logits O(1) (norm scales around 1)."""
    model = Transformer(cfg, rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path[-1] == "scale":
            new = rng.uniform(0.5, 1.5, var.shape)
        else:
            new = rng.normal(0.0, 0.15, var.shape)
        var[...] = jnp.asarray(new, var.dtype)
    return model


def _hf_logits(hf_model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf_model(torch.from_numpy(tokens).long()).logits.float().numpy()


def _tokens(vocab: int, t: int = 40) -> np.ndarray:
    return np.random.default_rng(7).integers(0, vocab, (2, t)).astype(np.int32)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_export_loads_in_transformers_with_same_logits(name: str, tmp_path: Path) -> None:
    cfg = CONFIGS[name]
    model = _random_model(cfg)
    out = save_hf_dir(model, cfg, tmp_path / "hf", tokenizer_files={"tokenizer_config.json": "{}"})
    names = set(read_safetensors(out / "model.safetensors"))
    assert ("lm_head.weight" in names) == (not cfg.tie_embeddings)
    gen_eos = json.loads((out / "generation_config.json").read_text()).get("eos_token_id")
    assert gen_eos == (list(cfg.eos_token_ids) if len(cfg.eos_token_ids) > 1 else next(iter(cfg.eos_token_ids), None))
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf_model).__name__.lower().startswith(cfg.arch)
    tokens = _tokens(cfg.vocab_size)  # 40 positions > original context 32 of the llama3-scaled case
    ref = _hf_logits(hf_model, tokens)
    ours, _ = model(jnp.asarray(tokens))
    diff = float(np.abs(np.asarray(ours) - ref).max())
    print(f"export {name}: max |ours - transformers(from_pretrained)| = {diff:.2e} (logit std {ref.std():.2f})")
    assert ref.std() > 0.5
    assert diff <= TOL


def test_bfloat16_export_keeps_dtype(tmp_path: Path) -> None:
    cfg = CONFIGS["qwen3"].replace(param_dtype="bfloat16")
    model = _random_model(cfg)
    out = save_hf_dir(model, cfg, tmp_path / "bf16")
    assert read_safetensors(out / "model.safetensors")["model.norm.weight"].dtype.name == "bfloat16"
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert hf_model.dtype == torch.bfloat16
    back_cfg, back = load_hf_dir(out, param_dtype="bfloat16")
    a = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    b = nnx.to_pure_dict(nnx.state(back, nnx.Param))
    assert jax.tree.all(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a, b))


def _hf_saved(tmp_path: Path, arch: str, **kw):
    cls = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}[arch]
    hf_cfg = getattr(transformers, cls)(
        vocab_size=72, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, initializer_range=0.2, **kw,
    )  # fmt: skip
    torch.manual_seed(1)
    hf_model = transformers.AutoModelForCausalLM.from_config(hf_cfg).eval()
    with torch.no_grad():
        for n, p in hf_model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return hf_model


@pytest.mark.parametrize(("arch", "shard"), [("llama", False), ("qwen2", True), ("qwen3", True)])
def test_transformers_saved_dir_loads_with_same_logits(arch: str, shard: bool, tmp_path: Path) -> None:
    hf_model = _hf_saved(tmp_path, arch, tie_word_embeddings=arch == "llama")
    out = tmp_path / "saved"
    hf_model.save_pretrained(out, max_shard_size="20KB" if shard else "5GB")
    assert (out / "model.safetensors.index.json").exists() == shard
    cfg, model = load_hf_dir(out)
    assert cfg.arch == arch
    tokens = _tokens(72, 24)
    ref = _hf_logits(hf_model, tokens)
    ours, _ = model(jnp.asarray(tokens))
    diff = float(np.abs(np.asarray(ours) - ref).max())
    print(f"load {arch} (sharded index: {shard}): max |ours - transformers| = {diff:.2e}")
    assert ref.std() > 0.5
    assert diff <= TOL


def test_load_errors_are_one_line(tmp_path: Path) -> None:
    hf_model = _hf_saved(tmp_path, "qwen3")
    good = tmp_path / "good"
    hf_model.save_pretrained(good)

    def error(path: Path, **kw) -> str:
        with pytest.raises((ValueError, FileNotFoundError)) as info:
            load_hf_dir(path, **kw)
        msg = str(info.value)
        assert "\n" not in msg
        return msg

    assert "not a directory" in error(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "config.json" in error(empty)

    noweights = tmp_path / "noweights"
    shutil.copytree(good, noweights)
    (noweights / "model.safetensors").unlink()
    assert "model.safetensors" in error(noweights)

    unsupported = tmp_path / "unsupported"
    shutil.copytree(good, unsupported)
    conf = json.loads((unsupported / "config.json").read_text())
    (unsupported / "config.json").write_text(json.dumps({**conf, "model_type": "gpt2"}))
    assert "gpt2" in error(unsupported)

    wrong = tmp_path / "wrong"
    shutil.copytree(good, wrong)
    (wrong / "config.json").write_text(json.dumps({**conf, "intermediate_size": 48}))
    msg = error(wrong)
    assert "model.layers.0.mlp.down_proj.weight" in msg and "(32, 64)" in msg

    tensors = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    cfg = ModelConfig.from_hf(conf)
    missing = dict(tensors)
    del missing["model.layers.1.self_attn.k_norm.weight"]
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.k_norm\.weight missing"):
        params_from_hf_state_dict(cfg, missing)
    with pytest.raises(ValueError, match="unexpected tensors.*model.layers.2"):
        params_from_hf_state_dict(cfg, {**tensors, "model.layers.2.mlp.up_proj.weight": np.zeros((64, 32))})
