"""A pool directory read as untrusted input: whoever ships a pool controls every byte, name and link in it.

`read_pool_dir(root)` is the only way `pools.load_pool` reads a directory. What it guarantees:
  * only regular files inside `root` are read: every path below `root` is checked with `lstat` on the way down
    (a symlinked `games/`, a game that is a symlink, a FIFO or a device is refused), and each file is opened
    with O_NOFOLLOW | O_NONBLOCK and checked again on the open descriptor (`fstat`), so a swap between the
    check and the open reads nothing else;
  * a size bound checked before reading (`MAX_GAME_BYTES` per program, the sandbox's own cap;
    `MAX_META_BYTES` for the manifest and checksum list), and never more than the bound is read;
  * with `checksums.sha256` present the pool is a closed world: every game file must be listed, and the bytes
    read are the bytes hashed (one read, no second look at the file);
  * file names must be UTF-8 text without control characters (what a terminal, SQLite and the tokenizer take).
Every refusal is a `ValueError` with one line naming the file (its name escaped), before anything runs. A
manifest's names and skills are made plain text in `EnvSource` (`text.safe_label`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from spade_jax.envs.text import printable

__all__ = ["CHECKSUMS", "MANIFEST", "MAX_GAME_BYTES", "MAX_META_BYTES", "PoolFile", "read_checksums",
           "read_pool_dir"]  # fmt: skip

MANIFEST, CHECKSUMS = "manifest.jsonl", "checksums.sha256"  # the released pool's layout
MAX_GAME_BYTES = 2_000_000  # one environment program (the sandbox's max_source_bytes)
MAX_META_BYTES = 64 << 20  # manifest.jsonl, checksums.sha256
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class PoolFile:
    """One game file of a pool: its path, its path relative to the pool, and its bytes (as read once)."""

    path: Path
    rel: str
    data: bytes


def _shown(name: str | bytes) -> str:
    """A file name as one printable line (undecodable bytes and control characters escaped)."""
    if isinstance(name, bytes):
        name = name.decode("utf-8", "backslashreplace")
    return printable(name.encode("utf-8", "backslashreplace").decode("utf-8")).replace("\n", "\\n")


def _check_name(root: Path, name: str) -> None:
    """A file name must be UTF-8 text without control characters (ValueError naming it otherwise)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{_shown(str(root))}: file name '{_shown(os.fsencode(name))}' is not UTF-8") from None
    if _CONTROL.search(name):
        raise ValueError(f"{_shown(str(root))}: file name '{_shown(name)}' holds control characters")


def _lstat_inside(root: Path, rel: str) -> os.stat_result:
    """lstat of `root/rel` after checking that no component below `root` is a symlink and none is `..`."""
    parts = Path(rel).parts
    if Path(rel).is_absolute() or any(p in ("..", "") for p in parts):
        raise ValueError(f"{_shown(str(root))}: '{_shown(rel)}' is outside the pool directory")
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            raise ValueError(f"{_shown(str(root))}: {_shown(rel)} is missing") from None
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{_shown(str(root))}: {_shown(rel)} is a symbolic link (only regular files inside "
                             "the pool are read)")  # fmt: skip
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{_shown(str(root))}: {_shown(rel)} is not inside a directory of the pool")
    return st


def read_regular(root: Path, rel: str, limit: int) -> bytes:
    """The bytes of the regular file `root/rel` (at most `limit`); ValueError naming it when it is a link, not a
    regular file (FIFO, device, directory), or larger than `limit`."""
    st = _lstat_inside(root, rel)
    where = f"{_shown(str(root))}: {_shown(rel)}"
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{where} is not a regular file")
    try:
        fd = os.open(root / rel, _OPEN_FLAGS)
    except OSError as e:
        raise ValueError(f"{where} cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)  # the file actually opened: a swap after the lstat is seen here
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where} is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{where} is {st.st_size} bytes (limit {limit})")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise ValueError(f"{where} is more than {limit} bytes")
    return data


def read_checksums(root: Path) -> dict[str, str] | None:
    """`checksums.sha256` as {relative path: sha256 hex}, or None when the pool has none; ValueError naming a
    malformed line or an entry outside the pool."""
    try:
        os.lstat(root / CHECKSUMS)
    except FileNotFoundError:
        return None
    text = read_regular(root, CHECKSUMS, MAX_META_BYTES).decode("utf-8", "replace")
    listed: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.fullmatch(r"([0-9a-fA-F]{64}) [ *](.+)", line.strip())
        if m is None:
            raise ValueError(f"{_shown(str(root / CHECKSUMS))}: line {n} is not '<sha256>  <file>'")
        rel = m.group(2)
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"{_shown(str(root / CHECKSUMS))}: line {n} names '{_shown(rel)}', outside the pool "
                             "directory")  # fmt: skip
        listed[str(Path(rel))] = m.group(1).lower()
    return listed


def read_manifest(root: Path) -> dict[str, dict]:
    """`manifest.jsonl` rows by the file name they describe (key `file`, `path`, `filename` or `game_file`)."""
    try:
        os.lstat(root / MANIFEST)
    except FileNotFoundError:
        return {}
    rows: dict[str, dict] = {}
    text = read_regular(root, MANIFEST, MAX_META_BYTES).decode("utf-8", "replace")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"{_shown(str(root / MANIFEST))}: line {n} is not JSON") from None
        ref = next((row[k] for k in ("file", "path", "filename", "game_file") if isinstance(row, dict)
                    and isinstance(row.get(k), str)), None)  # fmt: skip
        if ref:
            rows[Path(ref).name] = row
    return rows


def read_pool_dir(root: Path) -> tuple[list[PoolFile], dict[str, dict]]:
    """The game files of a pool directory (flat, or the released layout's `games/`) with their bytes, and the
    manifest rows by file name; every check in the module docstring applied, ValueError (one line) otherwise."""
    root = Path(root)
    games_dir = ""
    try:
        st = os.lstat(root / "games")
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{_shown(str(root))}: games is a symbolic link (only files inside the pool are read)")
        games_dir = "games" if stat.S_ISDIR(st.st_mode) else ""
    except FileNotFoundError:
        pass
    names = []
    with os.scandir(root / games_dir if games_dir else root) as it:
        for entry in it:
            if entry.name.endswith(".py") and not entry.name.startswith("_"):
                names.append(entry.name)
    for name in names:
        _check_name(root, name)
    names.sort()
    if not names:
        raise ValueError(f"pool directory {_shown(str(root))} has no .py environment files")
    listed = read_checksums(root)
    files = []
    for name in names:
        rel = str(Path(games_dir, name)) if games_dir else name
        data = read_regular(root, rel, MAX_GAME_BYTES)
        if listed is not None:
            digest = listed.get(rel)
            if digest is None:
                raise ValueError(f"{_shown(str(root))}: {_shown(rel)} is not listed in {CHECKSUMS} (a pool with "
                                 "checksums loads only the files it lists)")  # fmt: skip
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"{_shown(str(root))}: {_shown(rel)} does not match its checksum in {CHECKSUMS} "
                                 "(damaged or edited)")  # fmt: skip
        files.append(PoolFile(root / rel, rel, data))
    for rel in sorted(set(listed or ()) - {f.rel for f in files}):  # listed, not a game: checked all the same
        try:
            os.lstat(root / rel)
        except FileNotFoundError:
            raise ValueError(f"{_shown(str(root))}: {_shown(rel)} is listed in {CHECKSUMS} but missing") from None
        if hashlib.sha256(read_regular(root, rel, MAX_META_BYTES)).hexdigest() != listed[rel]:
            raise ValueError(f"{_shown(str(root))}: {_shown(rel)} does not match its checksum in {CHECKSUMS} "
                             "(damaged or edited)")  # fmt: skip
    return files, read_manifest(root)
