"""Model presets: `models/<name>.toml` files naming the architecture numbers and where the weights come from.

Looked up in $SPADE_JAX_MODELS_DIR, then the repository's `models/` (editable install), then the copy a
regular install puts under `<prefix>/share/spade-jax/models`. `load_preset` also accepts a path to a .toml.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from spade_jax.model.config import ModelConfig

ENV_VAR = "SPADE_JAX_MODELS_DIR"


@dataclass(frozen=True)
class Preset:
    """A named model: its config, and `weights` = None (random init), "gguf:embedded", "gguf:<path>",
    "hf:<org>/<name>" (a Hugging Face directory the user downloaded) or "hf:<local dir>"."""

    name: str
    model: ModelConfig
    weights: str | None = None
    notes: str = ""

    @property
    def weights_kind(self) -> str | None:
        """The kind of weights: "gguf", "hf" or None."""
        return self.weights.split(":", 1)[0] if self.weights else None

    @property
    def weights_ref(self) -> str | None:
        """What follows the kind: "embedded", a path, or a hub repo id."""
        return self.weights.split(":", 1)[1] if self.weights else None


def models_dirs() -> list[Path]:
    """Directories searched for presets, in order (existing ones only)."""
    dirs = []
    if os.environ.get(ENV_VAR):
        dirs.append(Path(os.environ[ENV_VAR]))
    dirs.append(Path(__file__).resolve().parents[2] / "models")
    dirs.append(Path(sys.prefix) / "share" / "spade-jax" / "models")
    return [d for d in dirs if d.is_dir()]


def list_presets() -> list[str]:
    """Names of all presets found (first directory wins on duplicates), sorted."""
    return sorted({p.stem for d in models_dirs() for p in d.glob("*.toml")})


def _find(name: str) -> Path:
    if name.endswith(".toml") and Path(name).is_file():
        return Path(name)
    for d in models_dirs():
        if (d / f"{name}.toml").is_file():
            return d / f"{name}.toml"
    available = ", ".join(list_presets()) or f"none (no models/ directory found; set {ENV_VAR})"
    raise ValueError(f"unknown model preset {name!r}; available: {available}")


def load_preset(name: str) -> Preset:
    """Reads preset `name` (or a .toml path); unknown names or malformed files raise a one-line ValueError."""
    path = _find(name)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None
    model = dict(data.get("model") or {})
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(model) - fields)
    if unknown:
        raise ValueError(f"{path}: unknown [model] key {unknown[0]!r}; expected ModelConfig fields")
    if "eos_token_ids" in model:
        model["eos_token_ids"] = tuple(model["eos_token_ids"])
    extra = sorted(set(data) - {"name", "weights", "notes", "model"})
    if extra:
        raise ValueError(f"{path}: unknown top-level key {extra[0]!r}; expected name, weights, notes, [model]")
    weights = data.get("weights") or None
    if weights is not None and weights.split(":", 1)[0] not in ("gguf", "hf"):
        raise ValueError(f"{path}: weights={weights!r}; expected 'gguf:...' or 'hf:...'")
    try:
        cfg = ModelConfig(**model)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: bad [model] section ({e})") from None
    return Preset(name=data.get("name", path.stem), model=cfg, weights=weights, notes=data.get("notes", ""))


def find_hf_dir(repo_id: str) -> Path | None:
    """A local directory holding the HF model `repo_id` ("Qwen/Qwen3-4B"), or None: a path itself, then
    $SPADE_JAX_HF_DIR/<name>, then the newest snapshot in the local Hugging Face cache (never downloads)."""
    if Path(repo_id).is_dir():
        return Path(repo_id)
    candidates = []
    if os.environ.get("SPADE_JAX_HF_DIR"):
        base = Path(os.environ["SPADE_JAX_HF_DIR"])
        candidates += [base / repo_id, base / repo_id.split("/")[-1]]
    hub = os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface")) / "hub"
    snaps = Path(hub) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    if snaps.is_dir():
        candidates += sorted(snaps.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    return next((c for c in candidates if (c / "config.json").is_file()), None)
