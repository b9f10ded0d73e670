"""Reads and writes the safetensors format with numpy only (bfloat16 via ml_dtypes), memory-mapped on read.

Memory-mapping lets the importer copy each device's slice of a tensor straight from disk, so a large
checkpoint never sits whole in host memory.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Tensors of one .safetensors file as read-only numpy views of a memory map (no data is read yet)."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", head)
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a safetensors file (bad header: {e})") from None
    header.pop("__metadata__", None)
    if not header:
        return {}
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        dt = _DTYPES[info["dtype"]]
        if end > data.size or (end - begin) != dt.itemsize * int(np.prod(info["shape"], dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name} has inconsistent offsets (truncated file?)")
        out[name] = data[begin:end].view(dt).reshape(info["shape"])
    return out


def write_safetensors(
    path: str | Path, tensors: Iterable[tuple[str, np.ndarray]] | Mapping[str, np.ndarray], metadata=None
) -> int:
    """Writes tensors (name, array) to one .safetensors file; returns the bytes of tensor data written.

    Accepts an iterable of pairs so large models can be streamed: each array is materialised only while written.
    Shapes and dtypes must be known up front, so every array is touched once for its header entry.
    """
    items = list(tensors.items() if isinstance(tensors, Mapping) else tensors)
    header: dict = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, arr in items:
        dt = np.dtype(arr.dtype)
        if dt not in _NAMES:
            raise ValueError(f"tensor {name}: dtype {dt} cannot be stored in safetensors")
        size = dt.itemsize * int(np.prod(arr.shape, dtype=np.int64))
        header[name] = {"dtype": _NAMES[dt], "shape": list(arr.shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the reference writer pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, arr in items:
            f.write(np.ascontiguousarray(arr).tobytes())
    return offset
