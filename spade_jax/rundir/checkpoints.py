"""Orbax checkpoints of a run: array trees (params, optimizer state) plus a JSON record of everything else.

The JSON record holds the step, RNG state, corpus iterator state, the environment-memory snapshot and the
resolved config, so `--resume` continues exactly. Orbax only lists finished checkpoints, so a `kill -9`
during an (async) save leaves the previous one as the latest. Trees are saved as given; a `Relayout` (given by
the caller, e.g. the model's stacked-vs-per-layer blocks) lets a restore read a tree saved in another layout.
"""

from __future__ import annotations

import gc
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import jax
import orbax.checkpoint as ocp

from spade_jax.rundir.paths import RunDirError, is_remote, set_aside_remote

__all__ = ["Checkpointer", "Relayout", "RunDirError", "one_line", "set_aside"]


class Relayout(Protocol):
    """A change in how a tree is laid out that a restore can undo (e.g. `model.layer_stack.LayerRelayout`)."""

    def stored_template(self, template: Any, stored_names: Sequence[str]) -> Any | None:
        """`template` (abstract: shapes, dtypes, shardings) laid out as the checkpoint stores it, judged from the
        names of its stored arrays; None when `template` matches it already."""

    def restored(self, tree: Any, template: Any) -> Any:
        """A tree restored in the stored layout, converted to `template`'s (and its shardings)."""


def _abstract(tree: Any) -> Any:
    """Shape/dtype/sharding stand-ins so restore places arrays straight into their shardings."""

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        return x

    return jax.tree.map(leaf, tree)


def one_line(e: BaseException) -> str:
    """An exception as one short line, for logs that must stay one line per event even when a library raises
    pages of text: the type and first message line of the root cause (Orbax wraps the TensorStore error that
    names the damaged file in a generic one)."""
    for _ in range(8):
        inner = e.__cause__ or e.__context__
        if inner is None:
            break
        e = inner
    text = e.args[0] if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str) else str(e)
    lines = text.strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:240]}" if lines else type(e).__name__


def set_aside(path: Path, run_dir: Path, name: str) -> Path:
    """Moves a damaged file or directory to `run_dir/damaged/<name>-<time>` (kept for inspection, never read
    again) and returns where it went; an OSError from the move propagates (nothing was changed then)."""
    into = run_dir / "damaged"
    into.mkdir(parents=True, exist_ok=True)
    dest = into / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while dest.exists():
        dest, n = into / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{n}", n + 1
    shutil.move(str(path), str(dest))
    return dest


def _raised_in_orbax(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from, passed through Orbax's own code."""
    for _ in range(8):
        if exc is None:
            return False
        tb = exc.__traceback__
        while tb is not None:
            if "/orbax/" in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return False


def _is_stray_read_error(u: Any) -> bool:
    """Whether an unraisable error is one a failed restore leaves behind: the other reads of the damaged
    checkpoint finish after Orbax closed its event loop ("Event loop is closed"), or fail inside Orbax's own
    read coroutines, each printed as a page of traceback although the restore's own error already says it."""
    if u.exc_type is RuntimeError and str(u.exc_value) == "Event loop is closed":
        return True
    code = getattr(u.object, "cr_code", None)
    return (code is not None and "/orbax/" in code.co_filename) or _is_store_error(u.exc_value)


_STORE_WORDS = ("TensorStore", "OCDBT", "tensorstore")
_failed_restores = [0]  # restores that raised in this process (their reads' leftovers are expected after)


def _is_store_error(exc: BaseException | None) -> bool:
    """An exception of a checkpoint read: raised through Orbax, or TensorStore's own (its futures carry no
    Python frames, only a message naming the store)."""
    if _raised_in_orbax(exc):
        return True
    for _ in range(8):
        if exc is None:
            return False
        if any(w in str(exc) for w in _STORE_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class _StrayReadTasks(logging.Filter):
    """Drops asyncio's "Task/Future exception was never retrieved" pages for a failed restore's other reads
    (logged when the task or future is collected, at a moment the garbage collector picks): those whose
    coroutine is Orbax's or whose exception is a checkpoint read's, and after a restore failed in this process,
    every one (nothing else here runs asyncio)."""

    def __init__(self) -> None:
        super().__init__()
        # bound now: the pages can come at interpreter exit, when module globals may already be cleared
        self._failed, self._is_store_error = _failed_restores, _is_store_error

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage() if record.args else str(record.msg)
            if "exception was never retrieved" not in msg:
                return True
            exc = record.exc_info[1] if record.exc_info else None
            return not (self._failed[0] or "/orbax/" in msg or self._is_store_error(exc))
        except Exception:  # a filter must never raise: that would print its own page
            return True


def _drop_stray_read_errors() -> None:
    """Installs (once per process) a sys.unraisablehook that drops `_is_stray_read_error` errors, passing every
    other one on to the hook before it, and the `_StrayReadTasks` filter on the asyncio logger."""
    previous = sys.unraisablehook
    if getattr(previous, "drops_stray_read_errors", False):
        return

    def hook(u: Any) -> None:
        if not _is_stray_read_error(u):
            previous(u)

    hook.drops_stray_read_errors = True
    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_StrayReadTasks())


class Checkpointer:
    """Saves and restores `{name: pytree}` plus a JSON `meta` dict under `directory/<step>/`."""

    def __init__(
        self, directory: str | Path, *, max_to_keep: int = 2, async_save: bool = True, relayout: Relayout | None = None
    ):
        self.relayout = relayout
        if is_remote(directory):  # gs://: Orbax lists and commits through etils' epath, TensorStore writes
            from etils import epath

            self.directory = epath.Path(str(directory))
        else:
            self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, trees: dict[str, Any], meta: dict[str, Any], *, wait: bool = False) -> None:
        """Starts saving (async by default); the previous save is finished first."""
        args = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
        args["meta"] = ocp.args.JsonSave(meta)
        self._manager.save(step, args=ocp.args.Composite(**args), force=True)
        if wait:
            self._manager.wait_until_finished()

    def restore(self, step: int | None, templates: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Restores the trees shaped like `templates` (into the templates' shardings) and the meta dict."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no finished checkpoint in {self.directory}")
        _drop_stray_read_errors()  # a damaged step's failed reads would print pages after the one error
        abstract = {name: _abstract(t) for name, t in templates.items()}
        stored = dict(abstract)
        if self.relayout is not None:
            for name, names in self._stored_names(step, list(templates)).items():
                alt = self.relayout.stored_template(abstract[name], names)
                stored[name] = abstract[name] if alt is None else alt
        args = {name: ocp.args.StandardRestore(t) for name, t in stored.items()}
        args["meta"] = ocp.args.JsonRestore()
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(**args))
        except BaseException:
            _failed_restores[0] += 1
            gc.collect()  # the other reads' futures go now, through the filter, not at interpreter exit
            raise
        trees = {name: out[name] for name in templates}
        for name in templates:
            if stored[name] is not abstract[name]:
                trees[name] = self.relayout.restored(trees[name], abstract[name])
        return trees, dict(out["meta"])

    def _stored_names(self, step: int, items: list[str]) -> dict[str, list[str]]:
        """The dotted names of the arrays each item holds in checkpoint `step` (read from the item's own metadata:
        a manager that has not saved this item yet knows no handler for it)."""
        out = {}
        reader = ocp.StandardCheckpointHandler()
        try:
            for name in items:
                item = self.directory / str(step) / name
                tree = reader.metadata(item) if item.exists() else None
                out[name] = [str(getattr(m, "name", "")) for m in jax.tree.leaves(tree)] if tree is not None else []
        finally:
            reader.close()
        return out

    def restore_meta(self, step: int | None = None) -> dict[str, Any]:
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no finished checkpoint in {self.directory}")
        out = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"])

    def set_aside(self, step: int, run_dir: Path) -> Path:
        """Moves a damaged step out of the checkpoint folder (see `set_aside`) so that resume never tries it
        again and the step can be saved anew when it is redone; returns where it went."""
        self.wait()
        if is_remote(self.directory):
            dest = set_aside_remote(str(self.directory / str(step)), f"{self.directory.parent}/damaged",
                                     f"checkpoint-{step}")  # fmt: skip
        else:
            dest = set_aside(self.directory / str(step), run_dir, f"checkpoint-{step}")
        self._manager.reload()
        return dest

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
