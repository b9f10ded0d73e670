"""Sandbox launchers' temp dirs: made owned (named with the owner's pid, an flock'ed owner.lock), removed when
their launcher closes or at exit (`close_all`), and those of runs that died without cleaning up removed by a
later run (`remove_stale_dirs`). Nothing here raises on a removal that fails: it is logged and left.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import re
import tempfile
from pathlib import Path

from spade_jax.infra.shutdown import deferred
from spade_jax.sandbox.inside.cleanup import remove_tree

__all__ = ["close_all", "owned_tempdir", "release_dir", "remove_stale_dirs"]

log = logging.getLogger("spade_jax.sandbox.launchers")  # one logger for the sandbox layer (tests listen on it)

# A launcher's temp dir: spade-sandbox-<level>-<owner pid>-<random>, holding owner.lock (flock'ed while it lives).
_DIR_PREFIX = "spade-sandbox-"
_DIR_NAME = re.compile(r"^spade-sandbox-[a-z]+-(\d+)-[a-z0-9_]+$")
_OWNER_LOCK = "owner.lock"

_open_dirs: dict[str, int] = {}  # this process's launcher temp dirs -> fd of the owner.lock each holds


def owned_tempdir(level: str) -> str:
    """A new launcher temp dir (mode 0711) named with this process's pid, with an owner.lock held under flock
    until it is released: `remove_stale_dirs` in a later run tells a dead owner by both. Recorded in
    `_open_dirs` at once, so `close_all` removes it even when the launcher never finishes starting."""
    with deferred():
        path = tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{level}-{os.getpid()}-")
        _open_dirs[path] = os.open(os.path.join(path, _OWNER_LOCK), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(_open_dirs[path], fcntl.LOCK_EX)
    os.chmod(path, 0o711)
    return path


def release_dir(path: str) -> None:
    """Removes one of this process's temp dirs, then lets go of its lock (idempotent)."""
    if not remove_tree(path):
        log.warning("could not remove everything in %s", path)
    fd = _open_dirs.pop(path, None)
    if fd is not None:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _lock_held(path: Path) -> bool:
    """True while some live process holds the dir's owner.lock: a run in another PID namespace that shares this
    /tmp, whose pid means nothing here. No lock file counts as not held; one that cannot be opened as held."""
    try:
        fd = os.open(path / _OWNER_LOCK, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _remove_tree(path: Path) -> None:
    """Removes a dead run's temp dir (`remove_tree`: mode-000 directories and deep trees included); what still
    cannot be removed is left and logged, never raised."""
    if not remove_tree(str(path)):
        log.warning("could not fully remove stale sandbox dir %s", path)


@atexit.register
def close_all() -> None:
    """Removes this process's temp dirs still open (a close cut short by Ctrl-C, a pool never closed or never
    finished starting): run at exit, and by the command line before it ends an interrupted run. Never raises."""
    for path in list(_open_dirs):
        with contextlib.suppress(Exception):
            release_dir(path)


def remove_stale_dirs(tmp: str | Path | None = None) -> list[str]:
    """Removes the launcher temp dirs (`$TMPDIR/spade-sandbox-*`) of runs that died without cleaning up: only
    dirs named with an owner pid that is not alive and whose owner.lock no process holds. A live run's dir,
    or one of the old naming without a pid, is never touched. Returns the removed paths (and logs them)."""
    removed = []
    for path in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{_DIR_PREFIX}*")):
        m = _DIR_NAME.match(path.name)
        if m is None or not path.is_dir() or path.is_symlink():
            continue
        if _pid_alive(int(m.group(1))) or _lock_held(path):
            continue
        _remove_tree(path)
        if not path.exists():
            removed.append(str(path))
    if removed:
        log.warning("removed %d sandbox temp dir(s) left by dead runs: %s", len(removed), ", ".join(removed))
    return removed
