"""Rotary position embeddings, with the frequency scalings used by llama/qwen checkpoints."""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np


def inv_frequencies(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> tuple[np.ndarray, float]:
    """Returns (inverse frequencies [head_dim // 2], attention scale applied to cos/sin)."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    if not scaling:
        return inv.astype(np.float32), 1.0
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv.astype(np.float32), 1.0
    if kind == "linear":
        return (inv / scaling["factor"]).astype(np.float32), 1.0
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        low_wavelen, high_wavelen = old_len / low, old_len / high
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        mid = (1 - smooth) * scaled / factor + smooth * scaled
        is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(is_mid, mid, scaled).astype(np.float32), 1.0
    if kind == "yarn":
        factor = scaling["factor"]
        old_len = scaling.get("original_max_position_embeddings", 4096)
        beta_fast, beta_slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)

        def correction_dim(rotations: float) -> float:
            return (head_dim * math.log(old_len / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), head_dim - 1)
        ramp = np.clip((np.arange(head_dim // 2) - low) / max(high - low, 1e-3), 0, 1)
        extrapolation = 1 - ramp
        inv = (inv / factor) * (1 - extrapolation) + inv * extrapolation
        attn = scaling.get("attention_factor") or (0.1 * math.log(factor) + 1.0)
        return inv.astype(np.float32), float(attn)
    raise ValueError(f"unsupported rope scaling type {kind!r}; supported: default, linear, llama3, yarn")


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, inv_freq: np.ndarray, attn_scale: float) -> jnp.ndarray:
    """Rotates x [B, T, H, D] by positions [B, T] (HF "rotate half" layout), computed in float32."""
    angles = positions[..., None].astype(jnp.float32) * jnp.asarray(inv_freq)  # [B, T, D/2]
    cos = (jnp.cos(angles) * attn_scale)[:, :, None, :]
    sin = (jnp.sin(angles) * attn_scale)[:, :, None, :]
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)
