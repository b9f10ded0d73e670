"""Tiny llama / qwen2 / qwen3 GGUF files written here with `gguf.GGUFWriter` the way llama.cpp's converter writes
them (q/k rows permuted for llama, mixed quantisation types), read by us and by `transformers` independently."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import quantize  # noqa: E402

from spade_jax.model.gguf_io import load_gguf  # noqa: E402
from spade_jax.model.loading import load_model  # noqa: E402

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
HEAD_DIM = {"llama": 16, "qwen2": 16, "qwen3": 128}  # qwen3: transformers takes head_dim from its config default
PRE = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("Ġ", "Ġ"), ("o", "n"), ("Ġ", "s")]
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
QTYPES = [Q.Q8_0, Q.Q4_1, Q.F16, Q.Q5_0, Q.BF16, Q.Q4_0, Q.F32, Q.Q5_1]


def _byte_chars() -> list[str]:
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    out, n = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in out:
            out[b], n = chr(256 + n), n + 1
    return [out[b] for b in range(256)]


def _vocab() -> list[str]:
    return SPECIALS + _byte_chars() + [a + b for a, b in MERGES]


def _hf_tensors(arch: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights in HF layout ([out, in])."""
    v, d = len(_vocab()), HEAD_DIM[arch]
    r = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(v, HIDDEN), "model.norm.weight": 1 + r(HIDDEN)}
    if arch != "llama":
        t["lm_head.weight"] = r(v, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + r(HIDDEN)
        t[p + "post_attention_layernorm.weight"] = 1 + r(HIDDEN)
        t[p + "self_attn.q_proj.weight"] = r(HEADS * d, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = r(KV_HEADS * d, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = r(KV_HEADS * d, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = r(HIDDEN, HEADS * d)
        t[p + "mlp.gate_proj.weight"] = r(FFN, HIDDEN)
        t[p + "mlp.up_proj.weight"] = r(FFN, HIDDEN)
        t[p + "mlp.down_proj.weight"] = r(HIDDEN, FFN)
        if arch == "qwen2":
            for n, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                t[p + f"self_attn.{n}_proj.bias"] = r(rows * d)
        if arch == "qwen3":
            t[p + "self_attn.q_norm.weight"] = 1 + r(d)
            t[p + "self_attn.k_norm.weight"] = 1 + r(d)
    return t


_TO_GGUF = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _gguf_name(name: str) -> str:
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if name in top:
        return top[name]
    _, _, i, *rest = name.split(".")
    module, leaf = ".".join(rest[:-1]), rest[-1]
    return f"blk.{i}.{_TO_GGUF[module]}.{leaf}"


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's LlamaModel.permute (rows regrouped for its interleaved RoPE)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(path, arch: str, tensors: dict[str, np.ndarray]) -> dict[str, Q]:
    w = gguf.GGUFWriter(str(path), arch)
    d = HEAD_DIM[arch]
    w.add_block_count(LAYERS)
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(d)
    w.add_value_length(d)
    w.add_rope_dimension_count(d)
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    tokens = _vocab()
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE[arch])
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    types = {}
    for k, (name, x) in enumerate(sorted(tensors.items())):
        if arch == "llama" and ".q_proj." in name:
            x = _llama_cpp_permute(x, HEADS)
        elif arch == "llama" and ".k_proj." in name:
            x = _llama_cpp_permute(x, KV_HEADS)
        qt = Q.F32 if x.ndim == 1 or name.startswith("model.layers.1.self_attn") else QTYPES[k % len(QTYPES)]
        types[name] = qt
        data = x if qt == Q.F32 else quantize(x, qt)
        w.add_tensor(_gguf_name(name), data, raw_dtype=None if qt == Q.F32 else qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def case(request, tmp_path_factory):
    arch = request.param
    folder = tmp_path_factory.mktemp(arch)
    tensors = _hf_tensors(arch, np.random.default_rng(1))
    types = _write_gguf(folder / "m.gguf", arch, tensors)
    return arch, folder, tensors, types


def test_tensors_and_config(case):
    arch, folder, tensors, types = case
    ckpt = load_gguf(folder / "m.gguf")
    assert set(ckpt.state_dict) == set(tensors)
    for name, x in tensors.items():
        got = ckpt.state_dict[name]
        assert got.shape == x.shape and got.dtype == np.float32, name
        if types[name] == Q.F32:  # stored exactly: q/k must come back un-permuted bit for bit
            np.testing.assert_array_equal(got, x, err_msg=name)
        else:
            assert np.abs(got - x).max() < 0.2, name  # quantisation error only, not a layout mix-up
    hf = ckpt.hf_config
    assert hf["model_type"] == arch and hf["head_dim"] == HEAD_DIM[arch]
    assert hf["tie_word_embeddings"] == (arch == "llama") and hf["rms_norm_eps"] == 1e-6


def test_logits_and_tokens_match_transformers(case):
    arch, folder, _, _ = case
    cfg, model, tok = load_model(str(folder / "m.gguf"))
    assert (cfg.arch, cfg.qkv_bias, cfg.qk_norm) == (arch, arch == "qwen2", arch == "qwen3")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file="m.gguf", dtype=torch.float32)
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file="m.gguf")
    texts = ["the then in a s", "  the 12345 and  \n\n in", "heron Ünïcode 😀 'll they're", "<|im_start|>x<|im_end|>"]
    for text in texts:
        assert tok.encode(text) == ref_tok(text)["input_ids"], repr(text)
    chat = [{"role": "user", "content": "in the"}, {"role": "assistant", "content": "on"}]
    assert tok.apply_chat_template(chat) == ref_tok.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )
    ids = tok.encode_chat(chat) + tok.encode(texts[1])
    ours = np.asarray(model(np.asarray([ids], np.int32))[0][0])
    with torch.no_grad():
        theirs = ref.eval()(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(ours - theirs).max() <= 1e-4
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
