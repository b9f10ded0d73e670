"""Checkpoints of a run and resuming from a damaged run directory.

A checkpoint holds the learner's arrays and a JSON record (the self-play state, the config, a copy of the
memory's rows and the metrics rows since the previous checkpoint). Resume uses the newest checkpoint that
restores whole, setting damaged newer ones aside; a damaged memory.sqlite is rebuilt from a record's copy.
Each case is said in one line; a run directory nothing can be resumed from is a `RunDirError`, nothing changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_jax.rundir.checkpoints import Checkpointer, RunDirError, one_line, set_aside
from spade_jax.rundir.metrics import MetricsLogger
from spade_jax.selfplay.cycle import SelfPlay
from spade_jax.selfplay.memory import damage, rebuild

if TYPE_CHECKING:
    from spade_jax.rl.learner import Learner

__all__ = ["check_record", "repair_memory", "restore", "save_checkpoint"]

log = logging.getLogger("spade_jax")


def save_checkpoint(ckpt: Checkpointer, step: int, metrics: MetricsLogger, *, learner: Learner,
                    selfplay: SelfPlay, config_json: str) -> None:  # fmt: skip
    """Saves the run at `step`. Besides the state, the record keeps a copy of the memory's rows (to rebuild a
    damaged memory.sqlite) and the metrics rows made since the previous checkpoint (to put back a torn one)."""
    state = learner.get_state()
    trees = {k: v for k, v in state.items() if k != "step"}  # params, opt_state (+ ref_params with KL)
    meta = {
        "step": step,
        "learner_step": int(state["step"]),
        "selfplay": selfplay.get_state(),
        "config": config_json,
        "memory_copy": selfplay.memory.dump(),
        "metrics": metrics.take_unsaved(),
    }
    ckpt.save(step, trees, meta)


def check_record(meta: dict[str, Any], step: int) -> None:
    """ValueError unless a checkpoint's JSON record has what a resume reads (a hand-edited or foreign one)."""
    if meta.get("step") != step or not isinstance(meta.get("learner_step"), int):
        raise ValueError(f"its record names step {meta.get('step')!r}, learner step {meta.get('learner_step')!r}")
    if not isinstance(meta.get("selfplay"), dict):
        raise ValueError("its record has no self-play state")


def restore(ckpt: Checkpointer, *, learner: Learner, selfplay: SelfPlay, sync: Callable[[], None], run_dir: Path,
            leader: bool = True) -> tuple[int, dict[str, Any]]:  # fmt: skip
    """Restores the newest checkpoint that restores whole (arrays and record), trying older kept ones when a
    newer one is damaged; damaged newer ones go to run_dir/damaged/ (by the `leader` host) so their steps are
    redone and saved anew; `sync` points the sampler at the restored parameters. Logs which step and why in one
    line; returns (step, record). RunDirError (one line) when none restores, and then nothing was changed."""
    state = learner.get_state()
    templates = {k: v for k, v in state.items() if k != "step"}
    failed: list[tuple[int, str]] = []
    for step in sorted(ckpt.all_steps(), reverse=True):
        try:
            trees, meta = ckpt.restore(step, templates)
            check_record(meta, step)
        except Exception as e:  # any damage: a truncated array file, a missing item, a record without a key
            failed.append((step, one_line(e)))
            continue
        learner.set_state({**trees, "step": meta["learner_step"]})
        sync()
        selfplay.set_state(meta["selfplay"])
        moved = [str(ckpt.set_aside(bad, run_dir)) for bad, _ in failed] if leader else []
        if failed:
            why = "; ".join(f"checkpoint {bad} does not restore ({reason})" for bad, reason in failed)
            log.warning("resuming from checkpoint %d: %s; moved to %s; the steps after %d are redone",
                        step, why, ", ".join(moved), step)  # fmt: skip
        else:
            log.info("resuming from checkpoint %d (the newest)", step)
        return step, meta
    reasons = "; ".join(f"checkpoint {bad}: {reason}" for bad, reason in failed)
    raise RunDirError(f"cannot resume {run_dir}: no checkpoint restores ({reasons})")


def repair_memory(run_dir: Path, ckpt: Checkpointer, resume: bool) -> None:
    """Before the memory is opened: a damaged memory.sqlite (not a database, failing its integrity check,
    missing while checkpoints exist) is moved to run_dir/damaged/ and, on resume, rebuilt from the copy in the
    newest checkpoint whose record reads (the resume then rolls it back to the step it restores, as it would
    the live file). One line says so. RunDirError (one line, nothing changed) when no record holds a copy."""
    path = run_dir / "memory.sqlite"
    steps = sorted(ckpt.all_steps(), reverse=True) if resume else []
    if not path.exists() and not steps:
        return
    why = damage(path)
    if why is None:
        return
    copy, source, failed = None, None, []
    for step in steps:
        try:
            meta = ckpt.restore_meta(step)
        except Exception as e:  # a damaged record: try the one before
            failed.append(f"checkpoint {step}: {one_line(e)}")
            continue
        copy, source = meta.get("memory_copy"), step
        break
    if steps and copy is None:
        held = f"checkpoint {source} holds no copy of it (written by an older version)" if source is not None else (
            f"no checkpoint record reads ({'; '.join(failed)})")  # fmt: skip
        raise RunDirError(f"cannot resume {run_dir}: {path.name} is damaged ({why}) and {held}; nothing was changed")
    moved = set_memory_aside(path, run_dir)
    if copy is None:
        log.warning("%s is damaged (%s): moved to %s; this run starts with an empty memory", path, why, moved)
        return
    rebuild(path, copy)
    log.warning("%s is damaged (%s)%s: rebuilt from the copy in checkpoint %d (%d rows)", path, why,
                f", moved to {moved}" if moved else "", source, len(copy))  # fmt: skip


def set_memory_aside(path: Path, run_dir: Path) -> str:
    """Moves a damaged memory file and its journal files to run_dir/damaged/ (a stale journal must not be
    replayed into the rebuilt file); returns where the file went ('' when there was none)."""
    moved = ""
    for suffix in ("", "-journal", "-wal", "-shm"):
        p = path.with_name(path.name + suffix)
        if p.exists():
            moved = moved or str(set_aside(p, run_dir, p.name))
    return moved
