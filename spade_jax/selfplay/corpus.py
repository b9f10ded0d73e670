"""Grounding corpus for the designer: a `grain` pipeline over document shards with an exactly restorable iterator.

Shards are JSONL, Parquet or ArrayRecord files (a configurable text field); the embedded default corpus is
built from Python's own documentation (`pydoc_data.topics` plus standard-library module docstrings read with
`ast`, never imported), so it needs no download. Order is a seeded shuffle, reshuffled every epoch
(`sampling="epochs"`), or an independent uniform draw per request (`"uniform"`, the reference's
`rng.sample(documents, 1)`); each document is cut to `max_doc_words` words (with the reference's marker when
`truncation_marker`) and to a token budget. `get_state()` / `set_state()` go into checkpoints.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import glob
import importlib.util
import json
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grain

from spade_jax import streams
from spade_jax.config.selfplay import CorpusConfig

__all__ = ["Corpus", "Document", "embedded_documents", "expand_paths", "open_source"]

_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".arrayrecord": "arrayrecord"}
_SKIP_MODULES = frozenset({"this", "antigravity", "__hello__", "__phello__", "idlelib", "test", "lib2to3"})


@dataclass(frozen=True)
class Document:
    """One grounding document: stable id, text (already truncated), and whether truncation happened."""

    id: str
    text: str
    source: str
    truncated: bool = False


# ------------------------------------------------------------------------------------------ sources


class _ListSource:
    """In-memory records (dicts with id/text)."""

    def __init__(self, records: list[dict], name: str):
        self._records = records
        self.name = name

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> dict:
        return self._records[index]


class _JsonlSource:
    """Random access to the lines of a JSONL file through a byte-offset index (built once, lazily read)."""

    def __init__(self, path: Path, text_field: str, id_field: str):
        self.path, self.text_field, self.id_field = path, text_field, id_field
        self.name = path.name
        offsets = []
        with open(path, "rb") as f:
            pos = 0
            for line in f:
                if line.strip():
                    offsets.append(pos)
                pos += len(line)
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index: int) -> dict:
        with open(self.path, "rb") as f:
            f.seek(self._offsets[index])
            line = f.readline()
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"corpus shard {self.path}: line for record {index} is not JSON ({e.msg})") from None
        return _record(obj, self.text_field, self.id_field, f"{self.name}:{index}", self.path)


class _ParquetSource:
    """Random access to Parquet rows; one row group is decoded at a time and cached."""

    def __init__(self, path: Path, text_field: str, id_field: str):
        import pyarrow.parquet as pq

        self.path, self.text_field, self.id_field = path, text_field, id_field
        self.name = path.name
        self._file = pq.ParquetFile(path)
        names = self._file.schema_arrow.names
        if text_field not in names:
            raise ValueError(f"corpus shard {path}: no '{text_field}' column (columns: {', '.join(names)})")
        self._columns = [text_field] + ([id_field] if id_field in names else [])
        self._starts = [0]
        for i in range(self._file.num_row_groups):
            self._starts.append(self._starts[-1] + self._file.metadata.row_group(i).num_rows)
        self._cached: tuple[int, dict[str, list]] | None = None

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int) -> dict:
        import bisect

        group = bisect.bisect_right(self._starts, index) - 1
        if self._cached is None or self._cached[0] != group:
            table = self._file.read_row_group(group, columns=self._columns)
            self._cached = (group, table.to_pydict())
        cols = self._cached[1]
        row = {name: values[index - self._starts[group]] for name, values in cols.items()}
        return _record(row, self.text_field, self.id_field, f"{self.name}:{index}", self.path)


class _ArrayRecordSource:
    """ArrayRecord shard: each record is a JSON object (with the text field) or raw UTF-8 text."""

    def __init__(self, path: Path, text_field: str, id_field: str):
        self.path, self.text_field, self.id_field = path, text_field, id_field
        self.name = path.name
        self._source = grain.sources.ArrayRecordDataSource([str(path)])

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> dict:
        raw = self._source[index]
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
        if text.lstrip().startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                return _record(obj, self.text_field, self.id_field, f"{self.name}:{index}", self.path)
        return {"id": f"{self.name}:{index}", "text": text, "source": self.name}


def _record(obj: Any, text_field: str, id_field: str, default_id: str, path: Path) -> dict:
    if not isinstance(obj, dict):
        raise ValueError(f"corpus shard {path}: record {default_id} is not an object")
    if text_field not in obj:
        fields = ", ".join(sorted(map(str, obj))) or "none"
        raise ValueError(f"corpus shard {path}: record {default_id} has no '{text_field}' field (fields: {fields})")
    text = obj[text_field]
    text = "" if text is None else str(text)
    doc_id = obj.get(id_field)
    return {"id": str(doc_id) if doc_id not in (None, "") else default_id, "text": text, "source": path.name}


class _Concat:
    """Several sources as one random-access sequence."""

    def __init__(self, sources: Sequence[Any]):
        self._sources = list(sources)
        self._starts = [0]
        for s in self._sources:
            self._starts.append(self._starts[-1] + len(s))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int) -> dict:
        import bisect

        k = bisect.bisect_right(self._starts, index) - 1
        return self._sources[k][index - self._starts[k]]


def expand_paths(paths: Sequence[str]) -> list[Path]:
    """The shard files that corpus paths (files, globs, folders) name; FileNotFoundError, one line, for a path
    that names none (a run checks this before it starts)."""
    files: list[Path] = []
    for pattern in paths:
        p = Path(pattern).expanduser()
        if p.is_dir():
            matched = sorted(str(x) for x in p.iterdir() if x.suffix in _SUFFIXES)
        else:
            matched = sorted(glob.glob(str(p))) if any(c in pattern for c in "*?[") else [str(p)]
        if not matched:
            raise FileNotFoundError(f"corpus: no files match {pattern!r}")
        for m in matched:
            mp = Path(m)
            if not mp.is_file():
                raise FileNotFoundError(f"corpus: {m} does not exist")
            files.append(mp)
    return files


def open_source(paths: Sequence[str], text_field: str = "text", id_field: str = "id") -> _Concat:
    """Random-access source over the given shard files/globs/directories (format from the file suffix)."""
    sources = []
    for path in expand_paths(paths):
        kind = _SUFFIXES.get(path.suffix.lower())
        if kind is None:
            raise ValueError(f"corpus: {path} has an unknown format (use .jsonl, .parquet or .arrayrecord)")
        cls = {"jsonl": _JsonlSource, "parquet": _ParquetSource, "arrayrecord": _ArrayRecordSource}[kind]
        src = cls(path, text_field, id_field)
        if len(src):
            src[0]  # fail early, with the shard named, on a missing text field
        sources.append(src)
    source = _Concat(sources)
    if len(source) == 0:
        raise ValueError(f"corpus: the shards {', '.join(map(str, paths))} hold no documents")
    return source


# ------------------------------------------------------------------------------------ embedded corpus


def _module_document(name: str, path: str) -> str | None:
    """Module docstring plus one line per public top-level class/function docstring (parsed, not imported)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return None
    parts = [f"Module {name}"]
    doc = ast.get_docstring(tree)
    if doc:
        parts.append(doc.strip())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
            d = ast.get_docstring(node)
            if d:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                parts.append(f"{kind} {name}.{node.name}: {d.strip().split(chr(10) + chr(10))[0]}")
    return "\n\n".join(parts) if len(parts) > 1 else None


@functools.lru_cache(maxsize=4)
def embedded_documents(min_chars: int = 200) -> tuple[dict, ...]:
    """The built-in corpus: pydoc topics and stdlib module documentation, in a fixed order."""
    docs: list[dict] = []
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip pydoc_data
        topics = {}
    for key in sorted(topics):
        text = topics[key].strip()
        if len(text) >= min_chars:
            docs.append({"id": f"pydoc:{key}", "text": text, "source": "pydoc_data.topics"})
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in _SKIP_MODULES:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None)
        if not origin or not origin.endswith(".py") or not os.path.realpath(origin).startswith(stdlib):
            continue
        text = _module_document(name, origin)
        if text and len(text) >= min_chars:
            docs.append({"id": f"stdlib:{name}", "text": text, "source": "stdlib"})
    return tuple(docs)


# ------------------------------------------------------------------------------------------- corpus


class Corpus:
    """Endless, seeded, epoch-reshuffled stream of grounding documents with an exactly restorable position."""

    def __init__(self, config: CorpusConfig = CorpusConfig(), tokenizer: Any = None):
        config = dataclasses.replace(config, seed=streams.seed_of(config.seed, 0, "corpus"))
        self.config = config
        self.tokenizer = tokenizer
        if config.paths:
            self._source = open_source(config.paths, config.text_field, config.id_field)
            self.name = ",".join(config.paths)
        else:
            self._source = _ListSource(list(embedded_documents(config.min_doc_chars)), "embedded")
            self.name = "embedded"
        if len(self._source) == 0:
            raise ValueError("corpus: no documents")
        truncate: Callable[[dict], Document] = self._truncate
        self._dataset = grain.MapDataset.source(self._source).shuffle(seed=config.seed).repeat(None).map(truncate)
        # Synchronous reads: a designer needs a few documents per step, and read-ahead threads would tokenize
        # documents that may never be used (and make a restored iterator re-read them).
        self._read = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        self._iter = iter(self._dataset.to_iter_dataset(self._read))
        self._uniform = random.Random(config.seed) if config.sampling == "uniform" else None
        self._draws = 0

    def __len__(self) -> int:
        """Number of documents in one epoch."""
        return len(self._source)

    def __iter__(self) -> Corpus:
        return self

    def __next__(self) -> Document:
        for _ in range(len(self._source)):
            if self._uniform is not None:  # with replacement, independent of every earlier draw
                self._draws += 1
                doc = self._truncate(self._source[self._uniform.randrange(len(self._source))])
            else:
                doc = next(self._iter)
            if doc.text.strip():
                return doc
        raise ValueError(f"corpus {self.name}: every document is empty")

    def next(self) -> Document:
        """The next document (skipping empty ones)."""
        return next(self)

    def get_state(self) -> dict:
        """JSON-able position of the iterator, for checkpoints."""
        state = dict(self._iter.get_state())
        state.update(corpus=self.name, num_docs=len(self._source), seed=self.config.seed)
        if self._uniform is not None:
            v, internal, gauss = self._uniform.getstate()
            state.update(uniform=[v, list(internal), gauss], draws=self._draws)
        return state

    def set_state(self, state: dict) -> None:
        """Restores a position from `get_state()`; the same corpus and seed are required."""
        if state.get("num_docs") not in (None, len(self._source)) or state.get("seed") not in (None, self.config.seed):
            raise ValueError(
                f"corpus state is for {state.get('num_docs')} docs / seed {state.get('seed')}, "
                f"this corpus has {len(self._source)} docs / seed {self.config.seed}"
            )
        inner = {k: v for k, v in state.items() if k not in ("corpus", "num_docs", "seed", "uniform", "draws")}
        self._iter.set_state(inner)
        if self._uniform is not None and state.get("uniform") is not None:
            v, internal, gauss = state["uniform"]
            self._uniform.setstate((v, tuple(internal), gauss))
            self._draws = int(state.get("draws", 0))

    @property
    def position(self) -> int:
        """Documents drawn so far (across epochs)."""
        if self._uniform is not None:
            return self._draws
        return int(self._iter.get_state().get("next_index", 0))

    def _truncate(self, record: dict) -> Document:
        cfg = self.config
        return truncate_document(record, cfg.max_doc_tokens, self.tokenizer, max_words=cfg.max_doc_words,
                                 marker=cfg.truncation_marker)  # fmt: skip


def truncate_words(text: str, max_words: int, *, marker: bool = False) -> tuple[str, bool]:
    """The first `max_words` whitespace-separated words of `text`, joined by single spaces (the reference's
    cut, spade/core/corpus.py), and whether anything was cut; text within the limit is returned unchanged. With
    `marker` a cut text ends with the reference's "\n[Document truncated at ~N words]" (N the limit)."""
    if max_words <= 0:
        return text, False
    words = text.split(maxsplit=max_words)
    if len(words) <= max_words:
        return text, False
    cut = " ".join(words[:max_words])
    return (cut + f"\n[Document truncated at ~{max_words} words]" if marker else cut), True


def truncate_document(record: dict, max_tokens: int, tokenizer: Any = None, *, max_words: int = 0,
                      marker: bool = False) -> Document:  # fmt: skip
    """Document cut to `max_words` words (0: no word cut; `marker`: the reference's note appended), then to
    `max_tokens` tokens (with a tokenizer) or about 4 characters per token (without); max_tokens <= 0 means no
    token cut."""
    text, cut = truncate_words(record["text"], max_words, marker=marker)
    if max_tokens <= 0:
        return Document(record["id"], text, record.get("source", ""), cut)
    if len(text) > 24 * max_tokens:  # no token covers more than ~24 chars in practice: cheap pre-cut
        text, cut = text[: 24 * max_tokens], True
    if tokenizer is None:
        if len(text) > 4 * max_tokens:
            text, cut = text[: 4 * max_tokens], True
    else:
        ids = list(tokenizer.encode(text))
        if len(ids) > max_tokens:
            text, cut = tokenizer.decode(ids[:max_tokens]), True
    return Document(record["id"], text, record.get("source", ""), cut)
