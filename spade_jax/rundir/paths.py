"""Run directories: a local folder, or a folder on shared storage (`gs://bucket/path`).

A remote run directory is worked in a local staging copy, because the writers of a run (SQLite memory,
metrics lines, TensorBoard events, the report) need a local disk:
- checkpoints are written by Orbax straight to `<url>/checkpoints` (TensorStore speaks gs:// itself);
- everything else (config.json, memory.sqlite, metrics.jsonl, tb/, gate_key, report.html, damaged/) is
  uploaded by `push`: after each step's metrics row and before that step's checkpoint starts, and at the end.
  So the bucket's copy is never behind its newest checkpoint, and a resume rolls a newer memory or metrics
  file back to the checkpoint's step exactly as it does for a local run (run/resume.py, rundir/metrics.py);
- `open_run_dir` fills the staging copy from the bucket first (an emptied folder, then every file but the
  checkpoints), so a fresh start and `--resume` see what a local run would.
A failed upload is one warning line and the run goes on (the next push sends it again); a bucket that cannot
be listed when the run opens is a `RunDirError`, one line, before any work. The staging folder is
`$SPADE_JAX_STAGING` (default ~/.cache/spade-jax/staging)/<bucket>/<path>. gs:// needs `gcsfs`
(`pip install 'spade-jax[gcs]'`); an emulator is used when STORAGE_EMULATOR_HOST and TENSORSTORE_GCS_HTTP_URL
point at it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("spade_jax")

REMOTE_SCHEMES = ("gs://",)
CHECKPOINTS = "checkpoints"


class RunDirError(ValueError):
    """A run directory that cannot be used or resumed as it is; the message is the one line the CLI prints."""


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` names shared storage (gs://...) rather than a local folder."""
    return str(path).startswith(REMOTE_SCHEMES)


class _OutOfRetries(logging.Filter):
    """Drops gcsfs's "out of retries" page (a traceback per failed request): `push` and `open_run_dir` say
    the same in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "out of retries" not in str(record.msg)


def _fs() -> Any:
    try:
        import fsspec

        gcsfs_log = logging.getLogger("gcsfs")
        if not any(isinstance(f, _OutOfRetries) for f in gcsfs_log.filters):
            gcsfs_log.addFilter(_OutOfRetries())
        return fsspec.filesystem("gs")
    except ImportError as e:
        raise RunDirError(f"a gs:// run directory needs gcsfs ({e}); pip install 'spade-jax[gcs]'") from e


def staging_dir(url: str) -> Path:
    """The local working copy of the remote run directory `url`."""
    root = Path(os.environ.get("SPADE_JAX_STAGING", "~/.cache/spade-jax/staging")).expanduser()
    return root / url.split("://", 1)[1].strip("/")


@dataclasses.dataclass
class RunDir:
    """Where a run's files go: `path` is the folder every writer uses (the run directory itself, or the
    staging copy of the remote `url`); `checkpoints` is where Orbax writes."""

    path: Path
    url: str | None = None
    writer: bool = True  # False on the other hosts of a multi-host job: they push nothing
    _sent: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def checkpoints(self) -> str | Path:
        return f"{self.url.rstrip('/')}/{CHECKPOINTS}" if self.url else self.path / CHECKPOINTS

    @property
    def name(self) -> str:
        return (self.url or str(self.path)).rstrip("/").rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return self.url or str(self.path)

    def where(self, rel: str) -> str:
        """Where the run's file `rel` lives for a user: in the bucket for a remote run directory."""
        return f"{self.url.rstrip('/')}/{rel}" if self.url else str(self.path / rel)

    def push(self) -> int:
        """Uploads the staging files that changed since the last push (none for a local run directory);
        returns how many went. A failure is one warning line: the next push sends them again."""
        if self.url is None or not self.writer:
            return 0
        sent = 0
        try:
            fs = _fs()
            for local in sorted(p for p in self.path.rglob("*") if p.is_file()):
                rel = local.relative_to(self.path).as_posix()
                if rel.endswith(("-journal", "-wal", "-shm", ".tmp")):
                    continue
                stat = local.stat()
                mark = (stat.st_size, stat.st_mtime_ns)
                if self._sent.get(rel) == mark:
                    continue
                with _snapshot(local) as src:
                    fs.put_file(str(src), f"{self.url.rstrip('/')}/{rel}")
                self._sent[rel] = mark
                sent += 1
        except Exception as e:  # storage down, quota, a file vanishing mid-walk: the run goes on
            log.warning("run directory %s: upload failed (%s: %s); it is retried at the next checkpoint",
                        self.url, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")  # fmt: skip
        return sent


class _snapshot:
    """A consistent copy of a SQLite database (SQLite's backup API, so an open connection's file is read
    whole), else the file itself."""

    def __init__(self, path: Path):
        self.path, self._tmp = path, None

    def __enter__(self) -> Path:
        if self.path.suffix != ".sqlite":
            return self.path
        fd, tmp = tempfile.mkstemp(suffix=".sqlite")
        os.close(fd)
        self._tmp = Path(tmp)
        src, dst = sqlite3.connect(self.path), sqlite3.connect(self._tmp)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        return self._tmp

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


def _finished_steps(names: list[str]) -> list[int]:
    """The steps of finished Orbax checkpoints among a checkpoints folder's entry names (a checkpoint being
    written sits in a temporary folder whose name is not a bare number)."""
    return sorted(int(n) for n in names if n.isdigit())


def checkpoint_steps(run_dir: str | os.PathLike) -> list[int]:
    """The finished checkpoint steps a local or gs:// run directory holds, read without Orbax (so without JAX):
    the refusals before a run starts use it."""
    if is_remote(run_dir):
        fs = _fs()
        url = f"{str(run_dir).rstrip('/')}/{CHECKPOINTS}"
        try:
            return _finished_steps([n.rstrip("/").rsplit("/", 1)[-1] for n in fs.ls(url)]) if fs.exists(url) else []
        except Exception as e:
            raise RunDirError(f"cannot read run directory {run_dir}: {type(e).__name__}: {e}") from e
    folder = Path(run_dir) / CHECKPOINTS
    return _finished_steps([p.name for p in folder.iterdir() if p.is_dir()]) if folder.is_dir() else []


def run_exists(run_dir: str | os.PathLike) -> bool:
    """Whether a local or gs:// run directory holds a run to resume (its config.json or a finished checkpoint)."""
    where = str(run_dir)
    if is_remote(where):
        return read_text(f"{where.rstrip('/')}/config.json") is not None or bool(checkpoint_steps(where))
    return (Path(where) / "config.json").is_file() or bool(checkpoint_steps(where))


def check_run_dir(run_dir: str | os.PathLike, *, resume: bool) -> None:
    """Refuses, with one line (RunDirError) and before anything is written, a run directory that cannot be used as
    asked: a path that is a file or lies inside one, a parent folder that cannot be written, `resume` of a folder
    that holds no run (no config.json), a fresh start in a folder that holds checkpoints (it would mix two runs:
    resume it, or choose another folder)."""
    where = str(run_dir)
    if is_remote(where):
        exists = read_text(f"{where.rstrip('/')}/config.json") is not None
    else:
        path = Path(where).expanduser()
        if path.exists() and not path.is_dir():
            raise RunDirError(f"run directory {where} is a file, not a folder")
        above = path if path.exists() else next(p for p in path.absolute().parents if p.exists())
        if not above.is_dir():
            raise RunDirError(f"run directory {where} cannot be made: {above} is a file, not a folder")
        if not os.access(above, os.W_OK | os.X_OK):
            raise RunDirError(f"run directory {where} cannot be written: no write permission on {above}")
        exists = (path / "config.json").is_file()
    steps = checkpoint_steps(where)
    if resume and not exists and not steps:
        raise RunDirError(f"--resume: {where} holds no run to resume (no config.json, no checkpoints); "
                          "leave out --resume to start a new run there")  # fmt: skip
    if not resume and steps:
        raise RunDirError(
            f"{where} already holds checkpoints (steps {', '.join(map(str, steps[-3:]))}); pass --resume to "
            "continue that run, or choose another --run-dir"
        )


def open_run_dir(run_dir: str | os.PathLike | RunDir, *, host: int = 0) -> RunDir:
    """The `RunDir` of a local path (made absolute, created) or of a gs:// URL (its staging copy filled from
    the bucket). RunDirError, one line, when the bucket cannot be read. `host` > 0: another host of a multi-host
    job, which writes nothing there (the leader is the one writer): its staging folder gets the saved config only."""
    if isinstance(run_dir, RunDir):
        return run_dir
    if not is_remote(run_dir):
        path = Path(run_dir).absolute()
        path.mkdir(parents=True, exist_ok=True)
        return RunDir(path, writer=host == 0)
    url = str(run_dir).rstrip("/")
    local = staging_dir(url)
    if host:
        local = local.with_name(f"{local.name}.host{host}")
    if local.exists():
        shutil.rmtree(local)
    local.mkdir(parents=True)
    rd = RunDir(local, url, writer=host == 0)
    try:
        fs = _fs()
        root = url.split("://", 1)[1]
        names = fs.find(url) if fs.exists(url) else []
        if host:  # another host: only the saved config (a resume reads it), the leader alone works the files
            names = [n for n in names if n[len(root) :].lstrip("/") == "config.json"]
        for name in names:
            rel = name[len(root) :].lstrip("/")
            if not rel or rel == CHECKPOINTS or rel.startswith(CHECKPOINTS + "/"):
                continue
            dest = local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"gs://{name}", str(dest))
            stat = dest.stat()
            rd._sent[rel] = (stat.st_size, stat.st_mtime_ns)
    except RunDirError:
        raise
    except Exception as e:
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        raise RunDirError(f"cannot read run directory {url}: {type(e).__name__}: {msg}") from e
    return rd


def set_aside_remote(src: str, into: str, name: str) -> str:
    """Moves the objects under the gs:// prefix `src` to `into/<name>-<time>` (a damaged checkpoint kept for
    inspection, as `checkpoint.set_aside` does on a local disk); returns where they went."""
    import time

    fs = _fs()
    dest = f"{into}/{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    fs.mv(src, dest, recursive=True)
    fs.invalidate_cache()
    return dest


def read_text(path: str | os.PathLike) -> str | None:
    """A small file of a local or remote run directory (config.json), or None when it is not there."""
    if is_remote(path):
        fs = _fs()
        return fs.cat_file(str(path)).decode() if fs.exists(str(path)) else None
    p = Path(path)
    return p.read_text() if p.is_file() else None
