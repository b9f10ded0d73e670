"""Environment memory: a SQLite archive in the run directory, exemplar selection, novelty, bounded size.

Every designer attempt is a row (valid or not, with its gate verdict). Valid environments form the ARCHIVE,
bounded to `capacity`; eviction rule: when an add pushes the archive over capacity, the entry made at the
earliest step leaves first (ties: the one added first), so the archive is a FIFO window over the run. Evicted
rows stay in the table with status 'evicted' (history is kept) but are no longer exemplars or novelty targets.
An environment that broke its contract on the training seeds (gates/audit.py) is 'retired' the same way.

Exemplars (DESIGN.md): positives have an unhinted win rate in [0.15, 0.85], ranked by regret, and n are
sampled from the top max(3n, 10); negatives have a win rate > 0.9 or < 0.1. Entries of the target skill are
preferred; seeds not yet measured fill in for missing positives at the start of a run. With
`exemplar_fallback=False` (the reference's) only entries of the target's kind and skill are exemplars, and no
unmeasured seed fills in.

Links between rows: `parent_id` is the attempt a repair repairs; `mutation_of` (origin "mutation") the archived
environment a mutation design changes (`mutation_parents` ranks the candidates). A file written before a
column existed gains it on open (NULL / its default).
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

from spade_jax import streams
from spade_jax.config.selfplay import MUTATION_PARENTS, MemoryConfig
from spade_jax.envs.text import valid_text
from spade_jax.gates.novelty import NoveltyConfig, NoveltyIndex, NoveltyResult

__all__ = ["EnvRecord", "Memory", "damage", "rebuild"]

_COLUMNS = """
    id TEXT PRIMARY KEY,
    code TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT '',
    skill TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL DEFAULT '',
    origin TEXT NOT NULL DEFAULT 'designer',
    status TEXT NOT NULL DEFAULT 'valid',
    doc_id TEXT,
    parent_id TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    verdict_valid INTEGER NOT NULL DEFAULT 0,
    verdict_gate TEXT,
    verdict_reason TEXT,
    win_rate_hint REAL,
    win_rate_no_hint REAL,
    return_hint REAL,
    return_no_hint REAL,
    regret REAL,
    designer_reward REAL,
    step INTEGER NOT NULL DEFAULT 0,
    plays INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL DEFAULT 0,
    mutation_of TEXT
"""
_MUTABLE = ("status", "win_rate_hint", "win_rate_no_hint", "return_hint", "return_no_hint", "regret",
            "designer_reward", "plays")  # fmt: skip


@dataclass
class EnvRecord:
    """One row of the archive (see the table columns)."""

    id: str
    code: str
    kind: str = ""
    skill: str = ""
    name: str = ""
    origin: str = "designer"
    status: str = "valid"
    doc_id: str | None = None
    parent_id: str | None = None
    attempt: int = 0
    verdict_valid: bool = False
    verdict_gate: str | None = None
    verdict_reason: str | None = None
    win_rate_hint: float | None = None
    win_rate_no_hint: float | None = None
    return_hint: float | None = None
    return_no_hint: float | None = None
    regret: float | None = None
    designer_reward: float | None = None
    step: int = 0
    plays: int = 0
    created: float = 0.0
    mutation_of: str | None = None  # a mutation design: the archived environment it changes (origin "mutation")

    @property
    def measured(self) -> bool:
        """True once the agent has played it (win rates known)."""
        return self.win_rate_no_hint is not None


_FIELDS = [f.name for f in fields(EnvRecord)]


def env_id(code: str, step: int, attempt: int = 0) -> str:
    """Stable id of an environment: step, attempt and a content hash."""
    digest = hashlib.sha1(code.encode("utf-8", errors="replace")).hexdigest()[:10]
    return f"s{step}-a{attempt}-{digest}"


class Memory:
    """The archive (SQLite file `path`, or ':memory:'), thread-safe."""

    def __init__(self, path: str | Path = ":memory:", config: MemoryConfig = MemoryConfig()):
        self.config = config
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        with self._lock, self._db:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS envs ({_COLUMNS})")
            self._add_missing_columns()
            self._db.execute("CREATE INDEX IF NOT EXISTS envs_status ON envs(status)")
        self.rng = random.Random(streams.seed_of(config.seed, 0, "memory"))
        self.novelty = self._novelty_index()
        for rec in self.archive():
            self.novelty.add(rec.id, rec.code)

    def _novelty_index(self) -> NoveltyIndex:
        return NoveltyIndex(NoveltyConfig(max_param_variants=self.config.max_param_variants))

    def _add_missing_columns(self) -> None:
        """Migration: a table written by an older version gets the columns added since (NULL / default)."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(envs)").fetchall()}
        for line in _COLUMNS.strip().splitlines():
            column = line.strip().rstrip(",")
            if column.split()[0] not in have:
                self._db.execute(f"ALTER TABLE envs ADD COLUMN {column}")

    # ------------------------------------------------------------------------------------ writing
    def add(self, record: EnvRecord) -> EnvRecord:
        """Inserts (or replaces) a row; a valid one joins the archive and may evict the oldest entry."""
        record.created = record.created or time.time()
        record.status = record.status if record.status != "valid" or record.verdict_valid else "invalid"
        for f in _FIELDS:  # SQLite refuses lone surrogates, which environment text (a verdict's reason) may carry
            if isinstance(getattr(record, f), str):
                setattr(record, f, valid_text(getattr(record, f)))
        values = [getattr(record, f) for f in _FIELDS]
        with self._lock, self._db:
            self._db.execute(
                f"INSERT OR REPLACE INTO envs ({', '.join(_FIELDS)}) VALUES ({', '.join('?' * len(_FIELDS))})",
                [int(v) if isinstance(v, bool) else v for v in values],
            )
            if record.status == "valid":
                self.novelty.add(record.id, record.code)
                self._evict()
            else:
                self._trim_invalid()
        return record

    def record_attempt(
        self,
        code: str,
        *,
        kind: str,
        skill: str,
        step: int,
        valid: bool,
        gate: str | None = None,
        reason: str | None = None,
        doc_id: str | None = None,
        parent_id: str | None = None,
        attempt: int = 0,
        name: str = "",
        origin: str = "designer",
        mutation_of: str | None = None,
    ) -> EnvRecord:
        """Records one designer attempt with its gate verdict; returns the stored row. `parent_id` is the
        attempt a repair repairs; `mutation_of` the archived environment a mutation design changes."""
        rid = env_id(code, step, attempt)
        suffix = 1
        while self.get(rid) is not None:
            rid = f"{env_id(code, step, attempt)}-{suffix}"
            suffix += 1
        rec = EnvRecord(id=rid, code=code, kind=kind, skill=skill, name=name, origin=origin,
                        status="valid" if valid else "invalid", doc_id=doc_id, parent_id=parent_id,
                        attempt=attempt, verdict_valid=valid, verdict_gate=gate, verdict_reason=reason,
                        step=step, mutation_of=mutation_of)  # fmt: skip
        return self.add(rec)

    def update_stats(
        self,
        env_id: str,
        *,
        win_rate_hint: float | None = None,
        win_rate_no_hint: float | None = None,
        return_hint: float | None = None,
        return_no_hint: float | None = None,
        regret: float | None = None,
        designer_reward: float | None = None,
        plays: int = 0,
    ) -> None:
        """Stores a measurement of an environment (latest values win) and adds `plays` to its play count."""
        updates = {k: v for k, v in dict(win_rate_hint=win_rate_hint, win_rate_no_hint=win_rate_no_hint,
                   return_hint=return_hint, return_no_hint=return_no_hint, regret=regret,
                   designer_reward=designer_reward).items() if v is not None}  # fmt: skip
        sets = "".join(f"{k} = ?, " for k in updates)
        with self._lock, self._db:
            cur = self._db.execute(
                f"UPDATE envs SET {sets}plays = plays + ? WHERE id = ?", [*updates.values(), int(plays), env_id]
            )
            if cur.rowcount == 0:
                raise KeyError(f"memory: no environment {env_id!r}")

    def retire(self, env_id: str) -> None:
        """Takes an environment out of the archive (status 'retired', history kept): it broke its contract on
        the training seeds. Unknown ids are ignored (environments outside the memory are not archived)."""
        with self._lock, self._db:
            cur = self._db.execute("UPDATE envs SET status = 'retired' WHERE id = ? AND status = 'valid'", (env_id,))
            if cur.rowcount:
                self.novelty.remove(env_id)

    def seed_from_library(self, seeds: Iterable | None = None) -> int:
        """Adds the hand-written seed environments (origin 'seed', step -1) once; returns how many were added.
        `seed_names` picks which; with `seed_difficulty="easiest"` a seed with a variant table enters as its
        easiest variant (its name kept, so the archive holds one entry per seed either way)."""
        if seeds is None:
            from spade_jax.envs.seeds import list_seeds

            seeds = list_seeds()
        wanted = set(self.config.seed_names)
        added = 0
        for info in seeds:
            rid = f"seed-{info.name}"
            if (wanted and info.name not in wanted) or self.get(rid) is not None:
                continue
            code = info.source
            reason = "hand-written seed"
            if self.config.seed_difficulty in ("easiest", "spread"):
                code, reason = _easiest(info.name, code)
            entries = [(rid, info.name, code, reason)]
            if self.config.seed_difficulty == "spread":
                entries += _spread(info.name, info.source, self.config.seed_spread, code)
            for eid, name, source, why in entries:
                self.add(EnvRecord(id=eid, code=source, kind=info.kind, skill=info.skill, name=name,
                                   origin="seed", status="valid", verdict_valid=True, verdict_gate="seed",
                                   verdict_reason=why, step=-1))  # fmt: skip
                added += 1
        return added

    def _evict(self) -> None:
        over = self.count() - self.config.capacity
        if over <= 0:
            return
        rows = self._db.execute(
            "SELECT id FROM envs WHERE status = 'valid' ORDER BY step ASC, rowid ASC LIMIT ?", (over,)
        ).fetchall()
        for row in rows:
            self._db.execute("UPDATE envs SET status = 'evicted' WHERE id = ?", (row["id"],))
            self.novelty.remove(row["id"])

    def _trim_invalid(self) -> None:
        n = self._db.execute("SELECT COUNT(*) FROM envs WHERE status = 'invalid'").fetchone()[0]
        if n > self.config.max_invalid_rows:
            self._db.execute(
                "DELETE FROM envs WHERE id IN (SELECT id FROM envs WHERE status = 'invalid' "
                "ORDER BY rowid ASC LIMIT ?)",
                (n - self.config.max_invalid_rows,),
            )

    # ------------------------------------------------------------------------------------ reading
    def get(self, env_id: str) -> EnvRecord | None:
        """The row with this id, or None."""
        with self._lock:
            row = self._db.execute("SELECT * FROM envs WHERE id = ?", (env_id,)).fetchone()
        return None if row is None else self._to_record(row)

    def archive(self, kind: str | None = None, skill: str | None = None) -> list[EnvRecord]:
        """Valid, non-evicted environments (oldest first), optionally filtered."""
        sql, args = "SELECT * FROM envs WHERE status = 'valid'", []
        if kind:
            sql, args = sql + " AND kind = ?", [*args, kind]
        if skill:
            sql, args = sql + " AND skill = ?", [*args, skill]
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY step ASC, rowid ASC", args).fetchall()
        return [self._to_record(r) for r in rows]

    def attempts(self, step: int | None = None) -> list[EnvRecord]:
        """All recorded rows (any status), optionally of one step, in insertion order."""
        sql, args = "SELECT * FROM envs", []
        if step is not None:
            sql, args = sql + " WHERE step = ?", [step]
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY rowid ASC", args).fetchall()
        return [self._to_record(r) for r in rows]

    def count(self, status: str = "valid") -> int:
        """Number of rows with a status ('valid' = archive size, 'invalid', 'evicted')."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM envs WHERE status = ?", (status,)).fetchone()[0])

    def archive_sources(self) -> dict[str, str]:
        """{id: code} of the archive (what the novelty gate compares against)."""
        return {r.id: r.code for r in self.archive()}

    def check_novelty(self, code: str) -> NoveltyResult:
        """Novelty of `code` against the archive."""
        with self._lock:
            return self.novelty.check(code)

    # ---------------------------------------------------------------------------------- exemplars
    def positives(self, n: int, *, kind: str | None = None, skill: str | None = None) -> list[EnvRecord]:
        """n positive exemplars: win rate in the band, ranked by regret, sampled from the top max(3n, 10)."""
        if n <= 0:
            return []
        lo, hi = self.config.positive_band
        pool = self._prefer(kind, skill, lambda r: r.measured and lo <= r.win_rate_no_hint <= hi)
        pool.sort(key=lambda r: (-(r.regret or 0.0), r.step))
        top = pool[: max(3 * n, 10)]
        chosen = self.rng.sample(top, min(n, len(top)))
        if len(chosen) < n and self.config.exemplar_fallback:  # early in a run: unmeasured seeds stand in
            spare = [r for r in self._prefer(kind, skill, lambda r: r.origin == "seed" and not r.measured)]
            chosen += self.rng.sample(spare, min(n - len(chosen), len(spare)))
        return chosen

    def negatives(self, n: int, *, kind: str | None = None, skill: str | None = None) -> list[EnvRecord]:
        """n negative exemplars: win rate > 0.9 (too easy) or < 0.1 (too hard), sampled uniformly."""
        if n <= 0:
            return []
        lo, hi = self.config.negative_low, self.config.negative_high
        pool = self._prefer(kind, skill, lambda r: r.measured and (r.win_rate_no_hint > hi or r.win_rate_no_hint < lo))
        return self.rng.sample(pool, min(n, len(pool)))

    def mutation_parents(self, kind: str, skill: str | None = None, rule: str = "band_then_regret") -> list[EnvRecord]:
        """Archived environments of `kind` eligible as mutation parents, best first: those of `skill` where there
        are any, else of the kind. `rule` (DesignerConfig.mutation_parents): "band_then_regret" = measured ones
        with a win rate in `positive_band` first, each group by regret (highest first), unmeasured ones last;
        "band" = measured in-band only; "regret" = measured by regret, then unmeasured; "seeds" = the seeds alone
        (origin "seed"), ranked as "band_then_regret". Ties: most recent first."""
        if rule not in MUTATION_PARENTS:
            raise ValueError(f"mutation parents: unknown rule {rule!r}")
        lo, hi = self.config.positive_band

        def in_band(r: EnvRecord) -> bool:
            return r.measured and lo <= r.win_rate_no_hint <= hi

        entries = [r for r in self.archive(kind) if r.measured or rule != "band"]
        entries = [r for r in entries if rule != "band" or in_band(r)]
        entries = [r for r in entries if rule != "seeds" or r.origin == "seed"]
        if skill:
            entries = [r for r in entries if r.skill == skill] or entries
        band_first = rule in ("band_then_regret", "seeds")
        return sorted(entries, key=lambda r: (not r.measured, band_first and not in_band(r), -(r.regret or 0.0),
                                              -r.step))  # fmt: skip

    def _prefer(self, kind: str | None, skill: str | None, keep) -> list[EnvRecord]:
        """Matching archive entries of the same kind and skill, else (`exemplar_fallback`) same kind, else any."""
        entries = [r for r in self.archive() if keep(r)]
        if not self.config.exemplar_fallback:
            return [r for r in entries if (not kind or r.kind == kind) and (not skill or r.skill == skill)]
        for narrowed in (
            [r for r in entries if (not kind or r.kind == kind) and (not skill or r.skill == skill)],
            [r for r in entries if not kind or r.kind == kind],
        ):
            if narrowed:
                return narrowed
        return entries

    # -------------------------------------------------------------------------------- checkpoints
    def get_state(self) -> dict:
        """JSON-able snapshot (row count, mutable fields of every row, exemplar RNG) for exact resume."""
        with self._lock:
            last = self._db.execute("SELECT COALESCE(MAX(rowid), 0) FROM envs").fetchone()[0]
            rows = self._db.execute(f"SELECT id, {', '.join(_MUTABLE)} FROM envs").fetchall()
        rng = self.rng.getstate()
        return {
            "last_rowid": int(last),
            "rows": {r["id"]: [r[k] for k in _MUTABLE] for r in rows},
            "rng": [rng[0], list(rng[1]), rng[2]],
        }

    def set_state(self, state: dict) -> None:
        """Rolls the archive back to a snapshot: later rows are deleted, mutable fields restored."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM envs WHERE rowid > ?", (int(state["last_rowid"]),))
            for rid, values in state["rows"].items():
                sets = ", ".join(f"{k} = ?" for k in _MUTABLE)
                self._db.execute(f"UPDATE envs SET {sets} WHERE id = ?", [*values, rid])
        v, internal, gauss = state["rng"]
        self.rng.setstate((v, tuple(internal), gauss))
        self.novelty = self._novelty_index()
        for rec in self.archive():
            self.novelty.add(rec.id, rec.code)

    def dump(self) -> list[dict]:
        """Every row (any status) with its rowid, in insertion order: the copy a checkpoint keeps so that a
        damaged file can be rebuilt (`rebuild`) exactly, eviction order included."""
        with self._lock:
            rows = self._db.execute(f"SELECT rowid, {', '.join(_FIELDS)} FROM envs ORDER BY rowid ASC").fetchall()
        return [{"rowid": r["rowid"], **{k: r[k] for k in _FIELDS}} for r in rows]

    def load(self, rows: list[dict]) -> None:
        """Makes this memory hold exactly `rows` (as `dump` gave them, rowids kept): how the other hosts of a
        multi-host job start from the leader's memory, so that every later write is the same everywhere."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM envs")
            _insert_rows(self._db, rows)
        self.novelty = self._novelty_index()
        for rec in self.archive():
            self.novelty.add(rec.id, rec.code)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @staticmethod
    def _to_record(row: sqlite3.Row) -> EnvRecord:
        data = {k: row[k] for k in row.keys()}
        data["verdict_valid"] = bool(data["verdict_valid"])
        return EnvRecord(**data)

    def summary(self) -> dict:
        """Counts for logging."""
        return {
            "archive": self.count("valid"),
            "invalid": self.count("invalid"),
            "evicted": self.count("evicted"),
            "retired": self.count("retired"),
        }

    def export_jsonl(self, path: str | Path) -> None:
        """Writes every row as one JSON object per line (for reports)."""
        with open(path, "w", encoding="utf-8") as f:
            for rec in self.attempts():
                f.write(json.dumps({k: getattr(rec, k) for k in _FIELDS}) + "\n")


def damage(path: str | Path) -> str | None:
    """Why the memory file at `path` cannot be used (missing, not a database, a failed integrity check, no
    envs table), or None when it is sound. Opening it may roll back a hot journal, as any open would."""
    path = Path(path)
    if not path.exists():
        return "the file is missing"
    try:
        db = sqlite3.connect(path)
        try:
            verdict = db.execute("PRAGMA quick_check").fetchone()[0]
            if verdict != "ok":
                return f"its integrity check fails ({verdict})"
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'envs'").fetchone() is None:
                return "it holds no envs table"
        finally:
            db.close()
    except sqlite3.Error as e:
        return str(e) or type(e).__name__
    return None


def _insert_rows(db: sqlite3.Connection, rows: list[dict]) -> None:
    """Inserts `Memory.dump` rows, rowids kept."""
    names = ["rowid", *_FIELDS]
    db.executemany(
        f"INSERT INTO envs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        [[row.get(k) for k in names] for row in rows],
    )


def rebuild(path: str | Path, rows: list[dict]) -> None:
    """Writes a memory file holding exactly `rows` (as `Memory.dump` gave them, rowids kept) at `path`. Written
    to a temporary file and renamed into place, so a crash here leaves whatever was at `path` before."""
    path = Path(path)
    tmp = path.with_name(path.name + ".rebuild")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    try:
        with db:
            db.execute(f"CREATE TABLE envs ({_COLUMNS})")
            db.execute("CREATE INDEX envs_status ON envs(status)")
            _insert_rows(db, rows)
    finally:
        db.close()
    tmp.replace(path)


def _spread(name: str, code: str, n: int, easiest: str) -> list[tuple[str, str, str, str]]:
    """(id, name, code, reason) of the n - 1 variants of a seed spread over its table after the easiest (`easiest`,
    archived as the seed itself), the hardest last; none for a seed without a table. Where the seed as written is
    its easiest, `spread` starts one step above it, so its first pick is the one left out."""
    from spade_jax.envs.variants import PARAMS, spread

    if name not in PARAMS or n <= 1:
        return []
    rest = [v for v in spread(name, n, code) if v.source != easiest][-(n - 1) :]
    return [(f"seed-{v.name}", v.name, v.source, f"hand-written seed, variant {v.name} (difficulty {v.difficulty:.2f})")
            for v in rest]  # fmt: skip


def _easiest(name: str, code: str) -> tuple[str, str]:
    """A seed's easiest variant and the reason recorded with it (the seed as written when it has no table)."""
    from spade_jax.envs.variants import PARAMS, extremes

    if name not in PARAMS:
        return code, "hand-written seed (no variant table: as written)"
    easy = extremes(name, code)[0]
    return easy.source, f"hand-written seed, easiest variant {easy.name}"
