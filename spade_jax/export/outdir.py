"""Output folders that an export fills: refused before any work when they cannot be used, filled beside the
target and renamed into place, so that a refused, failed or interrupted export leaves what was there as it was.

`check_out_dir(out)` refuses (one line, ValueError) an output path that is a file, lies inside a file, or is a
folder that already holds files (unless `overwrite`): an export never deletes or rewrites files it did not make.
`filling(out)` yields a fresh sibling folder (`.<name>.partial-<pid>`) to write into; on success the old folder
(if any, with `overwrite`) is moved aside, the new one renamed to `out` and the old one removed; on any failure the
partial folder is removed and `out` is untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["check_out_dir", "filling"]


def check_out_dir(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "--out") -> Path:
    """The output folder `out` as a Path, after refusing one that cannot be used (see the module docstring)."""
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {out} is a file, not a folder")
    above = path if path.exists() else next(p for p in path.absolute().parents if p.exists())
    if not above.is_dir():
        raise ValueError(f"{flag} {out} cannot be made: {above} is a file, not a folder")
    parent = path.absolute().parent if path.exists() else above  # where the new folder is made and renamed
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {out} cannot be written: no write permission on {parent}")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        n = sum(1 for _ in path.iterdir())
        raise ValueError(f"{flag} {out} is not empty ({n} entries); pass --overwrite to replace it, or choose a new "
                         "folder")  # fmt: skip
    return path


@contextlib.contextmanager
def filling(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "--out") -> Iterator[Path]:
    """A fresh folder beside `out` to write into, renamed to `out` when the block ends without an error."""
    path = check_out_dir(out, overwrite=overwrite, flag=flag).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    old = None
    if path.exists():  # empty, or replaced on --overwrite: moved aside first, so `out` is never half-written
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    partial.rename(path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
