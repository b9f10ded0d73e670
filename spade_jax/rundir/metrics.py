"""Run metrics: one JSON line per step in `metrics.jsonl`, mirrored to TensorBoard scalars and, with `logger=wandb`,
to Weights & Biases (rundir/wandb_sink.py).

Rows are appended as they are made; each checkpoint also keeps the rows made since the previous one
(`take_unsaved`), so a resume can put back a row that a crash cut mid-line (`repair_metrics`).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_STEP_PREFIX = re.compile(r'^\{"step": (-?\d+)')  # how every row starts (json.dumps keeps "step" first)


class MetricsLogger:
    """Appends step metrics to `run_dir/metrics.jsonl` and `run_dir/tb/`; safe to reopen after a resume.

    On opening, the file is repaired (`repair_metrics`): with `resume_step`, rows after it are dropped (they
    are redone) and rows of steps up to it that are missing are put back from `known_rows` (the rows the
    restored checkpoint keeps); a torn line is always cut off, so the next row never joins it.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        resume_step: int | None = None,
        known_rows: Iterable[dict[str, Any]] = (),
        tensorboard: bool = True,
        write: bool = True,
        wandb: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ):
        """`wandb`: W&B settings (project, entity, name, group, tags, mode; rundir/wandb_sink.py) to log there too,
        with `config` as the W&B run's config; None: no W&B."""
        self.path = Path(run_dir) / "metrics.jsonl"
        self.write = write  # False: the rows are kept for the checkpoint only (another host than the leader)
        self._unsaved: list[dict[str, Any]] = []
        self._writer = None
        self._wandb = None
        if not write:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            note = repair_metrics(self.path, resume_step, list(known_rows))
            if note:
                log.warning("%s", note)
        if tensorboard:
            from tensorboardX import SummaryWriter

            # A resume from step N keeps rows 1..N and redoes N+1 on: TensorBoard drops every event at or after
            # purge_step, so the first step to drop is N + 1 (purge_step=N would drop step N's own row).
            purge = None if resume_step is None else resume_step + 1
            self._writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge)
        if wandb is not None:
            from spade_jax.rundir.wandb_sink import WandbSink

            self._wandb = WandbSink(run_dir, wandb, config)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": int(step)}
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                row[key] = float(value) if math.isfinite(value) else None
            elif hasattr(value, "item"):
                row[key] = float(value.item())
        self._unsaved.append(row)
        if not self.write:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._writer is not None:
            for key, value in row.items():
                if key != "step" and value is not None:
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if self._wandb is not None:
            self._wandb.log(row)

    def take_unsaved(self) -> list[dict[str, Any]]:
        """The rows logged since the last call: what the checkpoint being written keeps a copy of."""
        rows, self._unsaved = self._unsaved, []
        return rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete rows of a metrics file (a torn last line from a crash is skipped)."""
    return _split(Path(path))[0] if Path(path).exists() else []


def repair_metrics(path: Path, resume_step: int | None, known_rows: list[dict[str, Any]]) -> str | None:
    """Rewrites `path` with whole rows only: torn lines (a write cut short by a crash) are cut, rows after
    `resume_step` dropped (they are redone), and rows of steps up to `resume_step` that the file lacks are put
    back from `known_rows`. Returns one line saying what was repaired when a line was torn (None otherwise).
    The new file is written beside the old one and renamed over it: a crash here leaves the old file."""
    rows, torn = _split(path)
    kept = [r for r in rows if resume_step is None or _step(r) <= resume_step]
    have = {_step(r) for r in kept}
    back = [r for r in known_rows if _step(r) not in have and (resume_step is None or _step(r) <= resume_step)]
    if len(kept) == len(rows) and not torn and not back:
        return None
    merged = sorted(kept + back, key=_step)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in merged))
    tmp.replace(path)
    return _repair_note(path, torn, {_step(r) for r in back}, resume_step) if torn else None


def _split(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(whole rows, torn lines) of a metrics file; blank lines are neither."""
    rows, torn = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            torn.append(line)
    return rows, torn


def _step(row: dict[str, Any]) -> int:
    step = row.get("step")
    return step if isinstance(step, int) else -1


def _repair_note(path: Path, torn: list[str], restored: set[int], resume_step: int | None) -> str:
    """One line on a repair: how many torn lines were cut and what became of each one's step."""
    fates = []
    for line in torn:
        m = _STEP_PREFIX.match(line)
        if m is None:
            fates.append("one of an unknown step is lost")
            continue
        step = int(m.group(1))
        if step in restored:
            fates.append(f"step {step}'s row was put back from the checkpoint")
        elif resume_step is not None and step > resume_step:
            fates.append(f"step {step}'s row is rewritten when the step is redone")
        else:
            fates.append(f"step {step}'s row is not in any kept checkpoint and is lost")
    return f"{path}: cut {len(torn)} torn line(s) (a write cut short); {'; '.join(fates)}"
