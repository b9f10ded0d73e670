"""Opening a GGUF file (llama.cpp's format) and reading its key/value metadata: the part of GGUF that both the
weights (`gguf_io.py`) and the tokenizer (`tokenizer.py`) need. A missing, truncated or damaged file is one
`FileNotFoundError` / `ValueError` line naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["GGUF_MAGIC", "open_gguf", "read_metadata"]


def read_metadata(reader: Any) -> dict[str, Any]:
    """All key/value metadata of an open `GGUFReader` as plain Python values (strings, numbers, lists)."""
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        out[key] = field.contents()
    return out


def open_gguf(path: str | Path) -> Any:
    """A `gguf.GGUFReader` on `path`, with one clear error for a missing or unreadable file."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # the reader raises assorted errors on a non-GGUF file
        raise ValueError(_unreadable(path, e)) from e
    _check_tensor_extents(reader, path)
    return reader


GGUF_MAGIC = b"GGUF"


def _unreadable(path: Path, error: Exception) -> str:
    """One line on why the reader refused `path`: a file that starts as a GGUF but does not parse is truncated or
    damaged (the reader's own words, e.g. a numpy dtype or reshape complaint, would not say so)."""
    with path.open("rb") as f:
        magic = f.read(len(GGUF_MAGIC))
    detail = " ".join(f"{type(error).__name__}: {error}".split())
    if magic != GGUF_MAGIC[: len(magic)]:  # a file cut inside the magic (or empty) still counts as truncated
        return f"{path} is not a readable GGUF file (no GGUF magic at the start; {detail})"
    size = path.stat().st_size
    return f"{path} is a truncated or damaged GGUF file ({size:,} bytes; the reader stopped with {detail})"


def _check_tensor_extents(reader: Any, path: Path) -> None:
    """Refuses a GGUF whose tensor data would run past the end of the file (cut at a tensor boundary, where the
    reader itself may not notice until a tensor is read)."""
    size = path.stat().st_size
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise ValueError(
                f"{path} is a truncated or damaged GGUF file ({size:,} bytes; tensor {t.name} needs {end:,})"
            )
