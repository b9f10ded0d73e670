"""Cleanup inside the sandbox between sessions: files an episode left (`remove_tree`; `remove_owned` for those of
one uid only, leaving the other live sessions' files alone) and its SysV IPC objects (`remove_ipc`). Where the
episode has namespaces of its own (`guard.isolate`) there is nothing of it here to remove: its tmpfs and IPC
objects went with it; this is for the levels where it could not have them.

STANDARD LIBRARY ONLY: imported by the worker inside the sandbox. Nothing an episode left can stop it: no
recursion on the Python stack, permissions restored on the way down, symlinks never followed, a deadline.
"""

from __future__ import annotations

import os
import time

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# SysV IPC control commands (Linux): (INFO, STAT) per kind; IPC_RMID removes. `ipc_perm` starts with the key,
# then uid, gid, cuid (int32 each).
_IPC_RMID = 0
_IPC_KINDS = {"shm": (14, 13), "msg": (12, 11), "sem": (19, 18)}


def remove_ipc(uid: int | None) -> int:
    """Removes the SysV shared-memory segments, message queues and semaphore sets that `uid` owns or created
    (every one when `uid` is None); returns how many. Run as `uid` (an owner may remove its own) and only in a
    sandbox's own IPC namespace: such objects outlive the processes that made them, so what one episode left
    would hold memory and carry data to the next. Never raises (no ctypes, no SysV IPC: nothing to remove)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        return 0
    buf = ctypes.create_string_buffer(1024)
    removed = 0
    for kind, (info, stat) in _IPC_KINDS.items():
        if kind == "sem":

            def ctl(ident, cmd, arg=None):
                return libc.semctl(ident, 0, cmd, arg)
        else:
            ctl = getattr(libc, f"{kind}ctl")
        try:
            highest = ctl(0, info, buf)
            for index in range(max(highest, -1) + 1):
                ident = ctl(index, stat, buf)
                if ident < 0:
                    continue
                owner, creator = int.from_bytes(buf.raw[4:8], "little"), int.from_bytes(buf.raw[12:16], "little")
                if uid is None or uid in (owner, creator):
                    removed += ctl(ident, _IPC_RMID, None) == 0
        except (AttributeError, OSError, ValueError):
            continue
    return removed


def remove_owned(dirs: list[str], uid: int, deadline: float | None = None, skip: tuple[str, ...] = ()) -> bool:
    """Deletes every entry directly in `dirs` that `uid` owns (a directory with all below it, see `remove_tree`);
    True when they all went. Run as `uid`: in a sticky /tmp it may delete only its own entries, and it never
    tries another's. False (never an exception) when something stayed or `deadline` passed."""
    ok = True
    for d in dirs:
        try:
            with os.scandir(d) as it:
                mine = [e.path for e in it if _owner(e) == uid and e.path not in skip]
        except OSError:
            continue
        for path in mine:
            ok = remove_tree(path, deadline) and ok
    return ok


def _owner(entry: os.DirEntry) -> int | None:
    try:
        return entry.stat(follow_symlinks=False).st_uid
    except OSError:
        return None


def remove_tree(path: str, deadline: float | None = None, *, keep_root: bool = False) -> bool:
    """Deletes the tree at `path` (only what is in it with `keep_root`); True when it is all gone.

    Written so that nothing an episode leaves behind can stop it: it walks with directory fds and a list of
    names instead of recursing (a tree 100,000 levels deep, or one whose paths exceed PATH_MAX, is no
    RecursionError), gives each directory it enters back its owner's permissions first (a mode-000 directory
    is emptied, not skipped), never follows a symlink, and stops at `deadline` (monotonic) with False.
    Any other failure (an entry it may not delete) is False too, never an exception.
    """
    try:
        os.chmod(path, 0o700, follow_symlinks=False) if not keep_root else None
    except (OSError, NotImplementedError):
        pass
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return True
    except OSError:
        try:
            if not keep_root:
                os.unlink(path)  # a file or a symlink: nothing to walk
                return True
        except OSError:
            pass
        return False
    try:
        done, fd = _remove_below(fd, deadline)
    finally:
        os.close(fd)
    if done and not keep_root:
        try:
            os.rmdir(path)
        except OSError:
            return False
    return done


def _remove_below(fd: int, deadline: float | None) -> tuple[bool, int]:
    """Empties the directory open as `fd`; (all gone, the fd to close: the same directory when all is gone)."""
    names: list[str] = []  # the directories entered below the root, in order
    pending, ok = _scan(fd, deadline)
    stack = [pending]  # per level: subdirectories still to enter
    while True:
        if deadline is not None and time.monotonic() > deadline:
            return False, fd
        if stack[-1]:
            child = _enter(fd, stack[-1].pop())
            if child is None:
                return False, fd
            os.close(fd)
            fd, name = child
            names.append(name)
            pending, level_ok = _scan(fd, deadline)
            ok = ok and level_ok
            stack.append(pending)
            continue
        stack.pop()
        if not names:
            return ok, fd
        try:
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
        except OSError:
            return False, fd
        os.close(fd)
        fd = parent
        try:
            os.rmdir(names.pop(), dir_fd=fd)
        except OSError:
            return False, fd


def _enter(fd: int, name: str) -> tuple[int, str] | None:
    """(fd, name) of subdirectory `name` opened for reading and made rwx for its owner (the episode may have
    taken read or write away: mode 000, 0o500); None when it cannot be entered (not ours, not a directory)."""
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:
        try:
            os.chmod(name, 0o700, dir_fd=fd, follow_symlinks=False)  # never through a symlink
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except (OSError, NotImplementedError):
            return None
    except OSError:
        return None
    try:
        os.fchmod(child, 0o700)  # write permission, to delete what is inside
    except OSError:
        pass
    return child, name


def _scan(fd: int, deadline: float | None) -> tuple[list[str], bool]:
    """Deletes the files, symlinks and empty directories in the directory open as `fd`; returns the names of
    the non-empty subdirectories (to enter) and whether every other entry went (False past `deadline`)."""
    subdirs, ok = [], True
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError:
        return [], False
    for i, entry in enumerate(entries):
        if deadline is not None and i % 256 == 255 and time.monotonic() > deadline:
            return subdirs, False
        try:
            if entry.is_dir(follow_symlinks=False):
                try:
                    os.rmdir(entry.name, dir_fd=fd)
                except OSError:
                    subdirs.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
        except OSError:
            ok = False
    return subdirs, ok
