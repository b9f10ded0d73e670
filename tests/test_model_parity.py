"""Logits parity with the `transformers` reference (float32, CPU) on random tiny llama / qwen2 / qwen3 models,
including RoPE scalings, plus the KV-cache paths (chunked prefill + decode, left padding) against the full pass."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402

from spade_jax.model.config import ModelConfig  # noqa: E402
from spade_jax.model.hf_io import params_from_hf_state_dict  # noqa: E402
from spade_jax.model.transformer import KVCache  # noqa: E402

TOL = 1e-4
VOCAB = 96
_BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=112,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
)
# name -> (transformers config class name, extra settings). Rope scalings use a short original context so the
# scaled frequencies matter at the positions tested (offset by POS_OFFSET).
CASES = {
    "llama": ("LlamaConfig", dict(tie_word_embeddings=True, rope_theta=10000.0)),
    "llama-llama3-rope": (
        "LlamaConfig",
        dict(
            tie_word_embeddings=False,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
    ),
    "llama-linear-rope": ("LlamaConfig", dict(rope_theta=10000.0, rope_scaling=dict(rope_type="linear", factor=4.0))),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=False, rope_theta=1000000.0)),
    "qwen2-yarn-rope": (
        "Qwen2Config",
        dict(
            tie_word_embeddings=True,
            rope_theta=10000.0,
            rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=128),
        ),
    ),
    "qwen3": ("Qwen3Config", dict(tie_word_embeddings=False, rope_theta=1000000.0)),
}
POS_OFFSET = 300


def _hf_model(case: str, seed: int = 0):
    """A random transformers model; every tensor (norm scales and biases too) redrawn so nothing is trivial."""
    cls_name, extra = CASES[case]
    hf_cfg = getattr(transformers, cls_name)(**_BASE, **extra)
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


def _ours(hf_model):
    cfg = ModelConfig.from_hf(hf_model.config.to_dict())
    tensors = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    return cfg, params_from_hf_state_dict(cfg, tensors)


def _tokens(b: int, t: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (b, t)).astype(np.int32)


def _hf_logits(hf_model, tokens: np.ndarray, positions: np.ndarray, attention_mask=None) -> np.ndarray:
    with torch.no_grad():
        kw = {} if attention_mask is None else {"attention_mask": torch.from_numpy(attention_mask)}
        out = hf_model(input_ids=torch.from_numpy(tokens).long(), position_ids=torch.from_numpy(positions).long(), **kw)
    return out.logits.float().numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(case: str) -> None:
    hf_model = _hf_model(case)
    cfg, model = _ours(hf_model)
    assert cfg.arch == case.split("-")[0]
    tokens = _tokens(2, 24)
    positions = np.broadcast_to(np.arange(24, dtype=np.int32) + POS_OFFSET, tokens.shape).copy()
    ref = _hf_logits(hf_model, tokens, positions)
    ours, _ = nnx.jit(lambda m, t, p: m(t, p))(model, jnp.asarray(tokens), jnp.asarray(positions))
    ours = np.asarray(ours)
    diff = float(np.abs(ours - ref).max())
    print(f"{case}: max |logits - transformers| = {diff:.2e} (logit std {ref.std():.2f})")
    assert ref.std() > 0.5, "reference logits are near-constant: the comparison would prove nothing"
    assert diff <= TOL
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() > 0.99


def test_rope_scaling_is_detectable() -> None:
    """The scaled cases must differ from the same weights without scaling, or the parity above shows nothing."""
    hf_model = _hf_model("llama-llama3-rope")
    cfg, model = _ours(hf_model)
    tensors = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
    plain = params_from_hf_state_dict(cfg.replace(rope_scaling=None), tensors)
    tokens = jnp.asarray(_tokens(1, 16))
    positions = jnp.asarray((np.arange(16, dtype=np.int32) + POS_OFFSET)[None])
    a, _ = model(tokens, positions)
    b, _ = plain(tokens, positions)
    assert float(jnp.abs(a - b).max()) > 100 * TOL


@pytest.mark.parametrize("case", ["llama-llama3-rope", "qwen2", "qwen3"])
def test_kv_cache_prefill_and_decode_match_full_forward(case: str) -> None:
    hf_model = _hf_model(case, seed=3)
    cfg, model = _ours(hf_model)
    b, t, prefill, cache_len = 2, 12, 7, 16
    tokens = _tokens(b, t, seed=4)
    full, _ = model(jnp.asarray(tokens))
    ref = _hf_logits(hf_model, tokens, np.broadcast_to(np.arange(t), tokens.shape).copy())
    assert float(np.abs(np.asarray(full) - ref).max()) <= TOL

    step = nnx.jit(lambda m, tok, cache, idx: m(tok, cache=cache, cache_index=idx))
    cache = KVCache.zeros(cfg, b, cache_len)
    logits, cache = step(model, jnp.asarray(tokens[:, :prefill]), cache, jnp.int32(0))
    got = [np.asarray(logits)]
    for i in range(prefill, t):
        logits, cache = step(model, jnp.asarray(tokens[:, i : i + 1]), cache, jnp.int32(i))
        got.append(np.asarray(logits))
    got = np.concatenate(got, axis=1)
    diff = float(np.abs(got - np.asarray(full)).max())
    print(f"{case}: max |cached - full| = {diff:.2e}")
    assert diff <= TOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_token_decode_matches_full_forward(case: str) -> None:
    """`Transformer.decode` (the sampler's step) gives the full pass's logits token by token, into the cache or
    into a chunk read beside it, with the model's own weights and with every CPU-fast layout."""
    hf_model = _hf_model(case, seed=6)
    cfg, model = _ours(hf_model)
    b, t, width = 2, 10, 4
    tokens = _tokens(b, t, seed=8)
    full = np.asarray(model(jnp.asarray(tokens))[0])
    pad = jnp.zeros((b,), jnp.int32)
    step = nnx.jit(lambda m, tok, pos, c, slot, lay: m.decode(tok, pos, c, slot, pad, layouts=lay))
    chunk_step = nnx.jit(
        lambda m, tok, pos, c, slot, lay, ch, j: m.decode(tok, pos, c, slot, pad, layouts=lay, chunk=ch, chunk_index=j)
    )
    variants = {
        "own": model.decode_layouts(),
        "head": model.decode_layouts(head=True),
        "kernels": model.decode_layouts(kernels=True),
        "both": model.decode_layouts(head=True, kernels=True),
    }
    for name, layouts in variants.items():
        cache, rows = KVCache.zeros(cfg, b, t), []
        for i in range(t):
            logits, cache = step(model, jnp.asarray(tokens[:, i]), jnp.full((b,), i, jnp.int32), cache, i, layouts)
            rows.append(np.asarray(logits))
        diff = float(np.abs(np.stack(rows, axis=1) - full).max())
        assert diff <= TOL, f"{case} {name}: max |decode - full| = {diff:.2e}"
    # the first `width` tokens into the cache, the rest into a chunk that is never flushed
    cache, rows = KVCache.zeros(cfg, b, t), []
    for i in range(width):
        logits, cache = step(model, jnp.asarray(tokens[:, i]), jnp.full((b,), i, jnp.int32), cache, i, None)
        rows.append(np.asarray(logits))
    chunk = KVCache.zeros(cfg, b, t - width)
    for j, i in enumerate(range(width, t)):
        pos = jnp.full((b,), i, jnp.int32)
        logits, chunk = chunk_step(model, jnp.asarray(tokens[:, i]), pos, cache, i, None, chunk, j)
        rows.append(np.asarray(logits))
    diff = float(np.abs(np.stack(rows, axis=1) - full).max())
    assert diff <= TOL, f"{case} chunk: max |decode - full| = {diff:.2e}"


def test_left_padded_cache_rows_match_unpadded_forward() -> None:
    """Left-padded batch through the cache (shared cache_index, per-row positions, pad slots masked) equals each
    row run alone; this is the layout the sampler uses."""
    hf_model = _hf_model("qwen3", seed=5)
    cfg, model = _ours(hf_model)
    lengths = [9, 5]
    width, cache_len = max(lengths), 12
    rows = [_tokens(1, n, seed=10 + n)[0] for n in lengths]
    tokens = np.zeros((2, width), np.int32)
    pads = np.array([width - n for n in lengths])
    for r, row in enumerate(rows):
        tokens[r, pads[r] :] = row
    slots = np.arange(width)
    positions = np.maximum(slots[None] - pads[:, None], 0).astype(np.int32)
    valid = slots[None, :] >= pads[:, None]  # [B, width] real (non-pad) slots
    kv_valid = np.zeros((2, cache_len), bool)
    kv_valid[:, :width] = valid
    causal = np.arange(cache_len)[None, :] <= slots[:, None]  # [T, S]
    mask = causal[None] & kv_valid[:, None, :]
    cache = KVCache.zeros(cfg, 2, cache_len)
    logits, cache = model(
        jnp.asarray(tokens), jnp.asarray(positions), cache=cache, cache_index=0, attn_mask=jnp.asarray(mask)
    )
    # one decode step after the prompt
    nxt = np.array([[7], [11]], np.int32)
    kv_valid[:, width] = True
    step_mask = kv_valid[:, None, :] & (np.arange(cache_len) <= width)[None, None, :]
    dec, _ = model(
        jnp.asarray(nxt),
        jnp.asarray((width - pads)[:, None].astype(np.int32)),
        cache=cache,
        cache_index=width,
        attn_mask=jnp.asarray(step_mask),
    )
    for r, row in enumerate(rows):
        alone = np.concatenate([row, nxt[r]])[None]
        ref = _hf_logits(hf_model, alone, np.arange(alone.shape[1])[None])
        got = np.concatenate([np.asarray(logits)[r, pads[r] :], np.asarray(dec)[r]], axis=0)
        assert float(np.abs(got - ref[0]).max()) <= TOL
