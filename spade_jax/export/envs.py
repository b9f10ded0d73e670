"""Export a run's environment archive in the layout of the SPADE paper's released environment pool.

OUT/games/game_{step:05d}_{index:03d}_{slug}.py holds each environment's source exactly as stored;
OUT/manifest.jsonl one row per file (metadata, measurements, gate verdict, sha256), in file order;
OUT/envs.jsonl the same rows with the source, which `datasets.load_dataset("json", data_files=...)` loads, and
OUT/envs.parquet the same table when pyarrow imports; OUT/checksums.sha256 lets `sha256sum -c` check the rest.
`spade_jax.envs.pools.load_pool(OUT)` plays it back as a fixed pool (checksums verified, manifest metadata used).

The memory is read through a read-only SQLite connection (no `Memory`, whose open migrates the table), so an
export never changes the run directory, even while a run still writes it. The export is built in a sibling
folder and renamed into place at the end: OUT is complete or untouched. Bad input is one ValueError or
FileNotFoundError line (the CLI prints it and exits 2) raised before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from spade_jax.envs.formats import source_contract
from spade_jax.envs.text import valid_text
from spade_jax.selfplay.memory import EnvRecord, damage

__all__ = ["NOT_GENERATED", "STATUSES", "ExportResult", "export_envs", "file_slug", "read_records"]

STATUSES: tuple[str, ...] = ("valid", "invalid", "evicted", "retired")
NOT_GENERATED: tuple[str, ...] = ("seed", "pool")  # origins left out unless all_origins: not written by the designer
_FLOATS = ("win_rate_hint", "win_rate_no_hint", "return_hint", "return_no_hint", "regret", "designer_reward")


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: how many environments, where, and whether envs.parquet is among the files."""

    count: int
    out: Path
    files: tuple[str, ...]  # relative paths, checksums.sha256 last
    parquet: bool


def file_slug(record: EnvRecord) -> str:
    """The file-name tail of an environment: its skill (its kind if no skill) lowercased, every run of characters
    other than ASCII letters and digits one "_" (none at the ends), at most 60 characters; "env" if nothing is left."""
    slug = re.sub(r"[^a-z0-9]+", "_", (record.skill or record.kind).lower()).strip("_")
    return slug[:60].rstrip("_") or "env"


def read_records(run_dir: str | Path, statuses: tuple[str, ...] = ("valid",)) -> list[EnvRecord]:
    """The rows of the run's memory with one of `statuses`, in archive order (step, then insertion)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no such run directory: {run_dir}")
    path = run_dir / "memory.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no memory.sqlite (not a run directory, or no step ran yet)")
    problem = damage(path)
    if problem:
        raise ValueError(f"{path} is unusable: {problem}")
    known = {f.name for f in fields(EnvRecord)}
    marks = ", ".join("?" * len(statuses))
    sql = f"SELECT * FROM envs WHERE status IN ({marks}) ORDER BY step ASC, rowid ASC"
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(sql, statuses).fetchall()
    except sqlite3.Error as e:
        raise ValueError(f"{path} cannot be read: {e}") from None
    records = [EnvRecord(**{k: row[k] for k in row.keys() if k in known}) for row in rows]
    for rec in records:
        rec.verdict_valid = bool(rec.verdict_valid)
    return records


def _number(value: Any) -> float | None:
    """A measurement as JSON allows it: NaN and infinities (never valid JSON) become null."""
    return float(value) if value is not None and math.isfinite(value) else None


def _row(rec: EnvRecord, file: str, digest: str) -> dict[str, Any]:
    return {"file": file, "id": rec.id, "name": rec.name, "kind": rec.kind, "skill": rec.skill,
            "contract": source_contract(rec.code), "origin": rec.origin, "status": rec.status, "step": rec.step,
            "parent_id": rec.parent_id, "mutation_of": rec.mutation_of,
            **{k: _number(getattr(rec, k)) for k in _FLOATS}, "plays": rec.plays,
            "verdict": {"valid": rec.verdict_valid, "gate": rec.verdict_gate, "reason": rec.verdict_reason},
            "sha256": digest}  # fmt: skip


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> bool:
    """envs.parquet with a fixed schema (a column that is null in every row keeps its type); False without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    text = pa.string()
    types = {"step": pa.int64(), "plays": pa.int64(), **dict.fromkeys(_FLOATS, pa.float64()),
             "verdict": pa.struct([("valid", pa.bool_()), ("gate", text), ("reason", text)])}  # fmt: skip
    names = list(_row(EnvRecord(id="", code=""), "", "")) + ["source"]
    schema = pa.schema([(name, types.get(name, text)) for name in names])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return True


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _jsonl(rows: list[dict[str, Any]]) -> str:
    # ensure_ascii: every line is pure ASCII, so no reader splits one at U+2028 or trips on an encoding
    return "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)


def export_envs(
    run_dir: str | Path, out: str | Path, *, all_origins: bool = False, statuses: tuple[str, ...] = ("valid",)
) -> ExportResult:
    """Writes the run's environments of `statuses` (generated ones only unless `all_origins`) to `out`, which
    must not exist or be an empty directory."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory (choose a new --out)")
    unknown = [s for s in statuses if s not in STATUSES]
    if unknown or not statuses:
        raise ValueError(f"--status: unknown status {', '.join(unknown) or '(none)'}; known: {', '.join(STATUSES)}")
    records = [r for r in read_records(run_dir, statuses) if all_origins or r.origin not in NOT_GENERATED]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by an export of this process id that crashed
    try:
        (tmp / "games").mkdir(parents=True)
        rows, files, per_step = [], [], {}
        for rec in records:
            at = max(rec.step, 0)  # seeds are archived at step -1, before the first step
            index = per_step[at] = per_step.get(at, -1) + 1
            file = f"games/game_{at:05d}_{index:03d}_{file_slug(rec)}.py"
            (tmp / file).write_bytes(valid_text(rec.code).encode("utf-8"))
            rows.append(_row(rec, file, _sha256(tmp / file)))
            files.append(file)
        (tmp / "manifest.jsonl").write_text(_jsonl(rows), encoding="utf-8")
        full = [{**row, "source": rec.code} for row, rec in zip(rows, records, strict=True)]
        (tmp / "envs.jsonl").write_text(_jsonl(full), encoding="utf-8")
        files += ["manifest.jsonl", "envs.jsonl"]
        parquet = _write_parquet(full, tmp / "envs.parquet")
        files += ["envs.parquet"] if parquet else []
        sums = "".join(f"{_sha256(tmp / f)}  {f}\n" for f in files)
        (tmp / "checksums.sha256").write_text(sums, encoding="utf-8")
        os.replace(tmp, out)  # an empty directory at `out` is replaced too (POSIX rename)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(count=len(records), out=out, files=(*files, "checksums.sha256"), parquet=parquet)
