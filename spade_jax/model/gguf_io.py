"""Read a GGUF checkpoint (llama.cpp's format) as a Hugging Face config, state dict, tokenizer and chat template.

Weights are dequantised to float32 with the `gguf` package, tensor names mapped to HF names, GGUF's reversed
dimension order turned back into numpy order, and llama.cpp's q/k row permutation (for its interleaved RoPE)
undone, so the result is exactly what a HF `model.safetensors` of the same network would hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from spade_jax.model.gguf_file import open_gguf, read_metadata
from spade_jax.model.tokenizer import Tokenizer

__all__ = ["GGUFCheckpoint", "GGUFTensors", "hf_config_from_metadata", "hf_name", "load_gguf", "open_gguf",
           "read_metadata"]  # fmt: skip

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3")
_HF_ARCH = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}

# GGUF tensor name (after `blk.N.`) -> HF name (after `model.layers.N.`).
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


class GGUFCheckpoint(NamedTuple):
    """What a GGUF holds, in HF terms. `state_dict` dequantises each tensor lazily, on access."""

    hf_config: dict[str, Any]
    state_dict: Mapping[str, np.ndarray]
    tokenizer: Tokenizer
    chat_template: str | None


def _clean_float(x: float) -> float:
    """GGUF stores float32; 9.999999747e-06 is the float32 nearest 1e-05, so give back the short decimal."""
    return float(str(np.float32(x)))


def hf_name(gguf_name: str) -> str:
    """The HF state-dict name of a GGUF tensor name (ValueError for tensors we have no place for)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _LAYER_RE.match(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    if gguf_name == "rope_freqs.weight":
        raise ValueError("GGUF has a rope_freqs tensor (llama3-style RoPE scaling), which this importer does not map")
    raise ValueError(f"GGUF tensor {gguf_name!r} has no HF counterpart in the llama/qwen2/qwen3 families")


def hf_config_from_metadata(meta: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """The HF `config.json` dict described by a GGUF's metadata and its tensors' numpy shapes (by GGUF name)."""
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"GGUF architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHS)}")

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    heads = int(key("attention.head_count"))
    kv_heads = key("attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # some files store one count per layer
        if len(set(kv_heads)) != 1:
            raise ValueError(f"GGUF has per-layer kv head counts {sorted(set(kv_heads))}; only uniform is supported")
        kv_heads = kv_heads[0]
    hidden = int(key("embedding_length"))
    if "token_embd.weight" not in shapes:
        raise ValueError("GGUF has no token_embd.weight tensor")
    vocab = shapes["token_embd.weight"][0]
    default_theta = 1_000_000.0 if arch.startswith("qwen") else 10_000.0
    cfg: dict[str, Any] = {
        "model_type": arch,
        "architectures": [_HF_ARCH[arch]],
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads),
        "head_dim": int(key("attention.key_length", hidden // heads)),
        "rope_theta": _clean_float(key("rope.freq_base", default_theta)),
        "rms_norm_eps": _clean_float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(key("context_length", 8192)),
        "tie_word_embeddings": "output.weight" not in shapes,
        "hidden_act": "silu",
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
        "torch_dtype": "float32",
    }
    if arch == "llama":
        cfg["attention_bias"] = "blk.0.attn_q.bias" in shapes
        cfg["mlp_bias"] = False
    scaling = key("rope.scaling.type")
    if scaling and scaling != "none":
        if scaling not in ("linear", "yarn"):
            raise ValueError(f"GGUF rope scaling {scaling!r} is not supported (linear, yarn are)")
        rope: dict[str, Any] = {"rope_type": scaling, "factor": _clean_float(key("rope.scaling.factor", 1.0))}
        if key("rope.scaling.original_context_length") is not None:
            rope["original_max_position_embeddings"] = int(key("rope.scaling.original_context_length"))
        cfg["rope_scaling"] = rope
    return cfg


def _unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k permutation: per head, rows [r0, r_half, r1, r_half+1, ...] -> [r0, r1, ...]."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GGUFTensors(Mapping[str, np.ndarray]):
    """HF-named float32 tensors of a GGUF, dequantised one at a time when read (peak memory: one tensor)."""

    def __init__(self, reader: Any, hf_config: Mapping[str, Any]):
        self._by_name = {}
        for t in reader.tensors:
            self._by_name[hf_name(t.name)] = t
        self._arch = hf_config["model_type"]
        self._heads = hf_config["num_attention_heads"]
        self._kv_heads = hf_config["num_key_value_heads"]

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __contains__(self, name: object) -> bool:  # Mapping's default would dequantise the tensor to answer
        return name in self._by_name

    def shape(self, name: str) -> tuple[int, ...]:
        """The numpy shape of a tensor without dequantising it."""
        return tuple(int(s) for s in reversed(self._by_name[name].shape))

    def __getitem__(self, name: str) -> np.ndarray:
        from gguf.quants import dequantize

        t = self._by_name[name]
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(self.shape(name))
        if self._arch == "llama":  # llama.cpp permutes llama q/k rows for its interleaved RoPE; qwen uses NeoX RoPE
            if ".self_attn.q_proj." in name:
                w = _unpermute_rows(w, self._heads)
            elif ".self_attn.k_proj." in name:
                w = _unpermute_rows(w, self._kv_heads)
        return np.ascontiguousarray(w)


def load_gguf(path: str | Path) -> GGUFCheckpoint:
    """Reads a GGUF into (HF config dict, lazy HF state dict of float32 arrays, tokenizer, chat template)."""
    reader = open_gguf(path)
    meta = read_metadata(reader)
    shapes = {t.name: tuple(int(s) for s in reversed(t.shape)) for t in reader.tensors}
    hf_config = hf_config_from_metadata(meta, shapes)
    tensors = GGUFTensors(reader, hf_config)
    tokenizer = Tokenizer.from_gguf_metadata(meta)
    return GGUFCheckpoint(hf_config, tensors, tokenizer, tokenizer.chat_template)
