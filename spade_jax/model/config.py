"""Architecture numbers for the decoder family (llama, qwen2, qwen3, qwen3_moe), and their HF `config.json` mapping."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp

ARCHS = ("llama", "qwen2", "qwen3", "qwen3_moe")
_HF_ARCH = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}
_MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# HF config.json keys that must hold a positive integer / a number when present (`check_hf_types`).
_HF_SIZES = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings",
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
)  # fmt: skip
_HF_NUMBERS = ("rope_theta", "rms_norm_eps")
_HF_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_hf_types(hf: dict[str, Any]) -> None:
    """Refuses a HF config whose size, number or token-id keys hold the wrong type (e.g. hidden_size="big"),
    naming the key: such a value would otherwise fail deep inside JAX when the model is built."""
    for key in _HF_SIZES:
        value = hf.get(key)
        if value is not None and not (_is_int(value) and value > 0):
            raise ValueError(f"{key}={value!r}: expected a positive integer")
    for key in _HF_NUMBERS:
        value = hf.get(key)
        if value is not None and not (isinstance(value, numbers.Real) and not isinstance(value, bool)):
            raise ValueError(f"{key}={value!r}: expected a number")
    for key in _HF_TOKEN_IDS:  # eos_token_id may also be a list of ids
        value = hf.get(key)
        ids = value if isinstance(value, list) and key == "eos_token_id" else [value]
        if value is not None and not all(_is_int(i) for i in ids):
            raise ValueError(f"{key}={value!r}: expected an integer token id")


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only transformer. Field names follow the HF config where one exists."""

    arch: str = "llama"
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # HF-style: {"rope_type": "linear" | "llama3" | "yarn", ...}
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    qkv_bias: bool = False  # qwen2
    qk_norm: bool = False  # qwen3: RMSNorm over head_dim on q and k
    max_position_embeddings: int = 8192
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype; logits are always float32
    # qwen3_moe: sparse layers (see is_moe_layer); intermediate_size is then the size of the dense layers' MLP
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    # Blocks stored stacked ([num_layers, ...] parameters) and run by one scan, so a forward compiles one block
    # whatever the depth (see `scanned`); not a HF setting, never exported.
    scan_layers: bool = True
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # unmapped HF keys, kept for export

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {ARCHS}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"{name}={getattr(self, name)!r}; expected one of {sorted(_DTYPES)}")
        if self.arch == "qwen3_moe":
            if not 0 < self.num_experts_per_tok <= self.num_experts or self.moe_intermediate_size <= 0:
                raise ValueError(
                    f"qwen3_moe needs 0 < num_experts_per_tok <= num_experts and moe_intermediate_size > 0; got "
                    f"{self.num_experts_per_tok}, {self.num_experts}, {self.moe_intermediate_size}"
                )
            if self.decoder_sparse_step < 1:
                raise ValueError(f"decoder_sparse_step={self.decoder_sparse_step}; expected >= 1")
        object.__setattr__(self, "mlp_only_layers", tuple(int(i) for i in self.mlp_only_layers))

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer i is sparse (the HF Qwen3-MoE rule: not in mlp_only_layers and (i+1) % step == 0)."""
        return (
            self.arch == "qwen3_moe"
            and self.num_experts > 0
            and i not in self.mlp_only_layers
            and (i + 1) % self.decoder_sparse_step == 0
        )

    @property
    def scanned(self) -> bool:
        """Whether the model stacks its blocks: `scan_layers` and every layer of the same kind (a Qwen3-MoE config
        whose dense and sparse layers mix keeps one module per layer)."""
        return self.scan_layers and len({self.is_moe_layer(i) for i in range(self.num_layers)}) <= 1

    @property
    def jnp_param_dtype(self) -> Any:
        return _DTYPES[self.param_dtype]

    @property
    def jnp_dtype(self) -> Any:
        return _DTYPES[self.dtype]

    def replace(self, **kwargs: Any) -> ModelConfig:
        return dataclasses.replace(self, **kwargs)

    @property
    def num_params(self) -> int:
        """Parameter count (embedding counted once when tied)."""
        e, f, d = self.hidden_size, self.intermediate_size, self.head_dim
        attn = e * d * (self.num_heads * 2 + self.num_kv_heads * 2)
        if self.qkv_bias:
            attn += d * (self.num_heads + 2 * self.num_kv_heads)
        if self.qk_norm:
            attn += 2 * d
        layer = attn + 3 * e * f + 2 * e
        head = 0 if self.tie_embeddings else self.vocab_size * e
        total = self.vocab_size * e + self.num_layers * layer + e + head
        for i in range(self.num_layers):  # sparse layers: router + experts instead of the dense MLP
            if self.is_moe_layer(i):
                total += self.num_experts * (e + 3 * e * self.moe_intermediate_size) - 3 * e * f
        return total

    @classmethod
    def from_hf(cls, hf: dict[str, Any], **overrides: Any) -> ModelConfig:
        """Builds a config from a HF `config.json` dict (llama, qwen2, qwen3, qwen3_moe model types)."""
        check_hf_types(hf)
        model_type = hf.get("model_type", "llama")
        arch = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "mistral": "llama"}.get(
            model_type
        )
        if arch is None:
            raise ValueError(f"unsupported HF model_type {model_type!r}; supported: llama, qwen2, qwen3, qwen3_moe")
        unsupported = {
            "hidden_act": hf.get("hidden_act", "silu") not in ("silu", "swish"),
            "use_sliding_window": bool(hf.get("use_sliding_window", False)),
            "mlp_bias": bool(hf.get("mlp_bias", False)),
            "sliding_window": model_type == "mistral" and hf.get("sliding_window") is not None,
            "attention_bias": arch != "qwen2" and bool(hf.get("attention_bias", False)),  # would add an o_proj bias
        }
        bad = [k for k, v in unsupported.items() if v]
        if bad:
            raise ValueError(f"unsupported {model_type} config setting {bad[0]}={hf[bad[0]]!r}")
        heads = hf["num_attention_heads"]
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        rope_scaling = hf.get("rope_scaling") or None
        rope_theta = hf.get("rope_theta")
        params = hf.get("rope_parameters")  # transformers >= 5 nests rope settings here
        if isinstance(params, dict):
            rope_theta = params.get("rope_theta", rope_theta)
            if params.get("rope_type", "default") != "default":
                rope_scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        known = {
            "model_type",
            "architectures",
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "rope_theta",
            "rope_scaling",
            "rope_parameters",
            "rms_norm_eps",
            "tie_word_embeddings",
            "attention_bias",
            "max_position_embeddings",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
            "torch_dtype",
            "dtype",
            *_MOE_KEYS,
            "num_local_experts",
            "mlp_only_layers",
        }
        cfg = dict(
            arch=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rope_theta=float(rope_theta if rope_theta is not None else 10000.0),
            rope_scaling=rope_scaling,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=arch == "qwen2",
            qk_norm=arch in ("qwen3", "qwen3_moe"),
            max_position_embeddings=hf.get("max_position_embeddings", 8192),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
            pad_token_id=hf.get("pad_token_id"),
            extra={k: v for k, v in hf.items() if k not in known},
        )
        if arch == "qwen3_moe":  # transformers 5 writes num_experts as num_local_experts (its attribute_map)
            cfg.update(
                num_experts=hf.get("num_experts", hf.get("num_local_experts", 128)),
                num_experts_per_tok=hf.get("num_experts_per_tok", 8),
                moe_intermediate_size=hf.get("moe_intermediate_size", 768),
                norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
                decoder_sparse_step=hf.get("decoder_sparse_step", 1),
                mlp_only_layers=tuple(hf.get("mlp_only_layers") or ()),
            )
        cfg.update(overrides)
        return cls(**cfg)

    def to_hf(self) -> dict[str, Any]:
        """The HF `config.json` dict that `transformers` loads as the same network."""
        hf: dict[str, Any] = dict(self.extra)
        eos = list(self.eos_token_ids)
        hf.update(
            model_type=self.arch,
            architectures=[_HF_ARCH[self.arch]],
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=self.tie_embeddings,
            max_position_embeddings=self.max_position_embeddings,
            hidden_act="silu",
            bos_token_id=self.bos_token_id,
            eos_token_id=eos[0] if len(eos) == 1 else (eos or None),
            pad_token_id=self.pad_token_id,
            torch_dtype=self.param_dtype,
        )
        if self.arch == "qwen3_moe":
            hf.update({k: getattr(self, k) for k in _MOE_KEYS}, mlp_only_layers=list(self.mlp_only_layers))
            hf.pop("num_local_experts", None)
        if self.arch == "llama":
            hf["attention_bias"] = self.qkv_bias
            hf["mlp_bias"] = False
        return hf
