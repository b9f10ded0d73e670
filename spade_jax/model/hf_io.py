"""Hugging Face interop: a HF state dict / model directory <-> our `Transformer`, loaded straight into shardings.

Our parameter paths mirror the HF module names, so the mapping is a rename plus a transpose of every linear
kernel ([in, out] here, [out, in] in HF). Exported directories load in `transformers` with `from_pretrained`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from spade_jax.model.config import ModelConfig
from spade_jax.model.layer_stack import LAYERS, is_stacked
from spade_jax.model.safetensors_io import read_safetensors, write_safetensors
from spade_jax.model.sharding import ShardingRules, param_shardings
from spade_jax.model.transformer import Transformer

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints carry; recomputed here
_MAX_SHARD_BYTES = 5 * 1024**3


def hf_name(path: tuple) -> tuple[str, bool]:
    """Our parameter path -> (HF tensor name, whether the HF tensor is the transpose of ours)."""
    *mods, leaf = (str(p) for p in path)
    mods = ["self_attn" if m == "attn" else m for m in mods]
    prefix = "" if mods and mods[0] == "lm_head" else "model."
    suffix = "bias" if leaf == "bias" else "weight"
    return prefix + ".".join([*mods, suffix]), leaf == "kernel"


_EXPERT_PROJS = ("gate_proj", "up_proj", "down_proj")


def layer_path(path: tuple, i: int) -> tuple:
    """A stacked block parameter's path with layer index i put after `layers` (the per-layer path HF names)."""
    keys = [str(p) for p in path]
    at = keys.index(LAYERS) + 1
    return (*keys[:at], str(i), *keys[at:])


class _LazyStack:
    """Sources of one shape stacked on a new first axis, lazily: a stacked [L, ...] block parameter over one source
    per layer (HF tensors, transposed views of them, or another `_LazyStack`), or an [E, in, out] expert kernel over
    the checkpoint's per-expert tensors. Slicing reads only the entries and rows asked for, so sharded loading reads
    only what a device holds."""

    def __init__(self, parts: list[Any]):
        self.parts = parts
        self.shape = (len(parts), *parts[0].shape)
        self.dtype = np.dtype(parts[0].dtype)

    def __getitem__(self, idx: tuple) -> np.ndarray:
        idx = idx if isinstance(idx, tuple) else (idx,)
        picked = range(len(self.parts))[idx[0]] if idx else range(len(self.parts))
        return np.stack([np.asarray(self.parts[i][tuple(idx[1:])]) for i in picked])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.stack([np.asarray(part, dtype=dtype) for part in self.parts])


def expert_param(path: tuple) -> tuple[str, str] | None:
    """For a stacked MoE expert kernel ([E, in, out], path `layers.i.mlp.experts.<proj>`): (HF prefix
    "model.layers.i.mlp.experts", proj). HF stores one [out, in] tensor per expert: `<prefix>.<j>.<proj>.weight`."""
    p = [str(x) for x in path]
    if len(p) >= 2 and p[-2] == "experts" and p[-1] in _EXPERT_PROJS:
        return "model." + ".".join(p[:-1]), p[-1]
    return None


def _expert_source(
    prefix: str, proj: str, shape: tuple, tensors: Mapping[str, np.ndarray], used: set[str]
) -> _LazyStack:
    """Collects expert kernel `proj` of every expert: per-expert HF tensors (what checkpoints on disk hold), or
    the fused `gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I] that transformers 5 keeps in memory."""
    n, din, dout = shape
    per_expert = [f"{prefix}.{j}.{proj}.weight" for j in range(n)]
    fused = f"{prefix}.{'down_proj' if proj == 'down_proj' else 'gate_up_proj'}"
    if per_expert[0] not in tensors and fused in tensors:
        src = tensors[fused]
        rows = dout if proj == "down_proj" else 2 * dout
        if tuple(src.shape) != (n, rows, din):
            raise ValueError(f"tensor {fused}: shape {tuple(src.shape)} in the checkpoint, expected {(n, rows, din)}")
        used.add(fused)
        lo = dout if proj == "up_proj" else 0
        return _LazyStack([src[j, lo : lo + dout, :].T for j in range(n)])
    parts = []
    for name in per_expert:
        if name not in tensors:
            raise ValueError(f"tensor {name} missing from the checkpoint")
        if tuple(tensors[name].shape) != (dout, din):
            got = tuple(tensors[name].shape)
            raise ValueError(f"tensor {name}: shape {got} in the checkpoint, expected {(dout, din)}")
        used.add(name)
        parts.append(tensors[name].T)
    return _LazyStack(parts)


def _abstract(cfg: ModelConfig) -> tuple[nnx.GraphDef, nnx.State]:
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def params_from_hf_state_dict(
    cfg: ModelConfig,
    tensors: Mapping[str, np.ndarray],
    *,
    mesh: Mesh | None = None,
    rules: ShardingRules | None = None,
) -> Transformer:
    """Builds a Transformer from HF-named tensors (numpy or memory-mapped), each cast to `cfg.param_dtype`.

    With a mesh, every device receives only its own slice of each tensor (copied from the host array), so the
    full model never sits on one device. Missing, unexpected or mis-shaped tensors raise a ValueError naming them.
    """
    graphdef, abstract = _abstract(cfg)
    shardings = param_shardings(abstract, mesh, rules) if mesh is not None else None
    flat = nnx.to_flat_state(abstract)
    flat_sh = dict(nnx.to_flat_state(shardings)) if shardings is not None else {}
    target = np.dtype(cfg.jnp_param_dtype)
    used: set[str] = set()
    leaves = []
    for path, var in flat:
        if is_stacked(path):  # one source per layer, read lazily through a stacked view
            per_layer = tuple(var.shape[1:])
            parts = [_source(layer_path(path, i), per_layer, tensors, used) for i in range(var.shape[0])]
            src = _LazyStack(parts)
        else:
            src = _source(path, tuple(var.shape), tensors, used)
        leaves.append((path, var.replace(_to_device(src, target, flat_sh.get(path)))))
    extra = [
        n
        for n in tensors
        if n not in used and not n.endswith(_IGNORED_SUFFIXES) and not (cfg.tie_embeddings and n == "lm_head.weight")
    ]
    if extra:
        more = f" (+{len(extra) - 5} more)" if len(extra) > 5 else ""
        raise ValueError(f"unexpected tensors for a {cfg.arch} config: {', '.join(sorted(extra)[:5])}{more}")
    return nnx.merge(graphdef, nnx.from_flat_state(leaves))


def _source(path: tuple, shape: tuple, tensors: Mapping[str, np.ndarray], used: set[str]) -> Any:
    """The checkpoint tensor(s) of the (per-layer) parameter at `path` of `shape`, in our layout; a ValueError
    naming the HF tensor when it is missing or mis-shaped."""
    expert = expert_param(path)
    if expert is not None:
        return _expert_source(*expert, shape, tensors, used)
    name, transposed = hf_name(path)
    if name not in tensors:
        hint = " (config says tie_word_embeddings=false)" if name == "lm_head.weight" else ""
        raise ValueError(f"tensor {name} missing from the checkpoint{hint}")
    src = tensors[name]
    want = tuple(reversed(shape)) if transposed else shape
    if tuple(src.shape) != want:
        raise ValueError(f"tensor {name}: shape {tuple(src.shape)} in the checkpoint, expected {want} for this config")
    used.add(name)
    return src.T if transposed else src


def _to_device(src: np.ndarray, dtype: np.dtype, sharding: jax.sharding.Sharding | None) -> jax.Array:
    if sharding is None:
        return jnp.asarray(np.asarray(src, dtype=dtype))
    return jax.make_array_from_callback(src.shape, sharding, lambda idx: np.asarray(src[idx], dtype=dtype))


def read_hf_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """Memory-mapped tensors of a HF directory: model.safetensors, or the shards a sharded index names."""
    path = Path(path)
    index, single = path / "model.safetensors.index.json", path / "model.safetensors"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files: dict[str, dict[str, np.ndarray]] = {}
        out = {}
        for name, fname in weight_map.items():
            if fname not in files:
                if not (path / fname).exists():
                    raise FileNotFoundError(f"{path / fname}: shard named in {index.name} is missing")
                files[fname] = read_safetensors(path / fname)
            if name not in files[fname]:
                raise ValueError(f"tensor {name}: {index.name} says it is in {fname}, but it is not there")
            out[name] = files[fname][name]
        return out
    if single.exists():
        return read_safetensors(single)
    others = sorted(p.name for p in path.glob("*.safetensors"))
    if len(others) == 1:
        return read_safetensors(path / others[0])
    if (path / "pytorch_model.bin").exists() or list(path.glob("pytorch_model*.bin")):
        raise FileNotFoundError(f"{path}: only pytorch_model*.bin found; only safetensors weights are supported")
    raise FileNotFoundError(f"{path}: no model.safetensors or model.safetensors.index.json")


def load_hf_dir(
    path: str | Path,
    *,
    mesh: Mesh | None = None,
    rules: ShardingRules | None = None,
    param_dtype: str | None = None,
    dtype: str | None = None,
    **overrides: Any,
) -> tuple[ModelConfig, Transformer]:
    """Reads a HF model directory (config.json + safetensors, single file or sharded index) into (cfg, model).

    param_dtype / dtype override the storage and compute dtypes (default float32); other keyword arguments
    override ModelConfig fields.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected a Hugging Face model directory)")
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: no config.json (expected a Hugging Face model directory)")
    try:
        hf = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path / 'config.json'}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path / 'config.json'}: not valid JSON ({e})") from None
    if not isinstance(hf, dict):
        raise ValueError(f"{path / 'config.json'}: expected a JSON object, got {type(hf).__name__}")
    if param_dtype is not None:
        overrides["param_dtype"] = param_dtype
    if dtype is not None:
        overrides["dtype"] = dtype
    try:
        cfg = ModelConfig.from_hf(hf, **overrides)
    except KeyError as e:
        raise ValueError(f"{path / 'config.json'}: missing key {e}") from None
    except ValueError as e:  # a bad value (ModelConfig.from_hf / check_hf_types): name the file it came from
        raise ValueError(f"{path / 'config.json'}: {e}") from None
    gen = path / "generation_config.json"
    if gen.exists() and not cfg.eos_token_ids:
        eos = json.loads(gen.read_text()).get("eos_token_id")
        if eos is not None:
            cfg = cfg.replace(eos_token_ids=tuple(eos) if isinstance(eos, list) else (eos,))
    return cfg, params_from_hf_state_dict(cfg, read_hf_tensors(path), mesh=mesh, rules=rules)


class _HostTensor:
    """A parameter fetched to host (and transposed) only when written, so export streams one tensor at a time."""

    def __init__(self, value: jax.Array, transposed: bool):
        self.value, self.transposed = value, transposed
        self.shape = tuple(reversed(value.shape)) if transposed else tuple(value.shape)
        self.dtype = np.dtype(value.dtype)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        v = self.value
        if not v.is_fully_addressable:  # multi-host: gather the global array on every host
            from jax.experimental import multihost_utils

            v = multihost_utils.process_allgather(v, tiled=True)
        host = np.asarray(jax.device_get(v))
        return np.ascontiguousarray(host.T if self.transposed else host, dtype=dtype)


class _SliceHostTensor(_HostTensor):
    """stacked[index] ([in, out] or a norm vector: a layer's, or a layer's expert's, slice of a stacked parameter)
    as HF's tensor; sliced only when written."""

    def __init__(self, stacked: jax.Array, index: tuple[int, ...], transposed: bool):
        self.stacked, self.index, self.transposed = stacked, index, transposed
        shape = tuple(stacked.shape[len(index) :])
        self.shape = tuple(reversed(shape)) if transposed else shape
        self.dtype = np.dtype(stacked.dtype)

    @property
    def value(self) -> jax.Array:
        return self.stacked[self.index]


def hf_state_items(model: Transformer) -> list[tuple[str, Any]]:
    """(HF name, host-convertible tensor) pairs for the model's parameters, HF layout, in HF order."""
    items = []
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = var[...]
        layers = range(value.shape[0]) if is_stacked(path) else [None]
        for i in layers:
            lpath, at = (path, ()) if i is None else (layer_path(path, i), (i,))
            expert = expert_param(lpath)
            if expert is not None:  # stacked experts -> one tensor per expert, as HF checkpoints store them
                prefix, proj = expert
                n = value.shape[len(at)]
                items += [(f"{prefix}.{j}.{proj}.weight", _SliceHostTensor(value, (*at, j), True)) for j in range(n)]
                continue
            name, transposed = hf_name(lpath)
            items.append((name, _HostTensor(value, transposed) if not at else _SliceHostTensor(value, at, transposed)))
    return sorted(items, key=lambda kv: kv[0])


def save_hf_dir(
    model: Transformer,
    cfg: ModelConfig,
    out_dir: str | Path,
    *,
    tokenizer_files: Mapping[str, str | bytes] | None = None,
    max_shard_bytes: int = _MAX_SHARD_BYTES,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Writes config.json, generation_config.json and safetensors weights (sharded with an index above
    max_shard_bytes) that `transformers` loads with `from_pretrained`; tied models store no lm_head.weight.
    tokenizer_files: file name -> contents (tokenizer.json, tokenizer_config.json, ...), written alongside.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_hf(), indent=2) + "\n")
    gen = {"bos_token_id": cfg.bos_token_id, "pad_token_id": cfg.pad_token_id}
    if cfg.eos_token_ids:
        gen["eos_token_id"] = cfg.eos_token_ids[0] if len(cfg.eos_token_ids) == 1 else list(cfg.eos_token_ids)
    gen = {k: v for k, v in gen.items() if v is not None}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")

    items = hf_state_items(model)
    shards: list[list[tuple[str, Any]]] = [[]]
    size = 0
    for name, t in items:
        nbytes = t.dtype.itemsize * int(np.prod(t.shape, dtype=np.int64))
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, t))
        size += nbytes
    for old in list(out.glob("model*.safetensors")) + [out / "model.safetensors.index.json"]:
        old.unlink(missing_ok=True)  # stale weights from an earlier export would confuse loaders
    if len(shards) == 1:
        write_safetensors(out / "model.safetensors", items)
    else:
        weight_map, total = {}, 0
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            if progress:
                progress(fname)
            total += write_safetensors(out / fname, shard)
            weight_map.update({name: fname for name, _ in shard})
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    for fname, content in (tokenizer_files or {}).items():
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(out / fname, mode) as f:
            f.write(content)
    return out
