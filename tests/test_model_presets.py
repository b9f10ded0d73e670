"""Model presets: every file loads, parameter counts match the published model cards, errors are one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_jax.model.presets import ENV_VAR, find_hf_dir, list_presets, load_preset

# Published totals / non-embedding counts (Qwen3 model cards; SmolLM2-135M) in billions, and their rounding.
PUBLISHED = {
    "qwen3-0.6b": (0.6, 0.44, 1, 2),
    "qwen3-1.7b": (1.7, 1.4, 1, 1),
    "qwen3-4b": (4.0, 3.6, 1, 1),
    "qwen3-4b-instruct-2507": (4.0, 3.6, 1, 1),
    "qwen3-8b": (8.2, 6.95, 1, 2),
    "qwen3-32b": (32.8, 31.2, 1, 1),
    "smollm2-135m": (0.135, None, 3, None),
}


def test_all_required_presets_exist() -> None:
    names = set(list_presets())
    assert {"tiny", "smollm2-135m", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-32b"} <= names


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_parameter_counts_match_published(name: str) -> None:
    p = load_preset(name)
    total, non_emb, r_total, r_non = PUBLISHED[name]
    cfg = p.model
    emb = cfg.vocab_size * cfg.hidden_size * (1 if cfg.tie_embeddings else 2)
    assert round(cfg.num_params / 1e9, r_total) == total
    if non_emb is not None:
        assert round((cfg.num_params - emb) / 1e9, r_non) == non_emb


def test_preset_fields() -> None:
    smol = load_preset("smollm2-135m")
    assert smol.weights == "gguf:embedded" and smol.weights_kind == "gguf" and smol.weights_ref == "embedded"
    m = smol.model
    assert (m.arch, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.vocab_size) == (
        "llama",
        30,
        576,
        9,
        3,
        49152,
    )
    assert smol.model.tie_embeddings and smol.model.rope_theta == 100000.0
    q = load_preset("qwen3-8b")
    assert q.weights == "hf:Qwen/Qwen3-8B" and q.model.qk_norm and not q.model.tie_embeddings
    tiny = load_preset("tiny")
    assert tiny.weights is None and tiny.model.num_layers <= 4


def test_unknown_and_malformed_presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown model preset 'nope'; available: .*qwen3-4b.*tiny"):
        load_preset("nope")
    (tmp_path / "mine.toml").write_text('name = "mine"\n[model]\narch = "llama"\nnum_layers = 1\n')
    (tmp_path / "typo.toml").write_text("[model]\nnum_layerz = 1\n")
    (tmp_path / "broken.toml").write_text("[model\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert load_preset("mine").model.num_layers == 1
    assert "tiny" in list_presets()  # the repository's presets are still found after the override dir
    with pytest.raises(ValueError, match="unknown \\[model\\] key 'num_layerz'"):
        load_preset("typo")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_preset("broken")
    assert load_preset(str(tmp_path / "mine.toml")).name == "mine"


def test_find_hf_dir_never_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("SPADE_JAX_HF_DIR", raising=False)
    assert find_hf_dir("Qwen/Qwen3-4B") is None
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-4B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    assert find_hf_dir("Qwen/Qwen3-4B") == snap
