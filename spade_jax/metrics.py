"""Run metrics: one JSON line per step in `metrics.jsonl`, mirrored to TensorBoard scalars."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Appends step metrics to `run_dir/metrics.jsonl` and `run_dir/tb/`; safe to reopen after a resume."""

    def __init__(self, run_dir: str | Path, *, resume_step: int | None = None, tensorboard: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            # Drop lines written after the checkpoint we resume from: they will be recomputed.
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._writer = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=resume_step)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": int(step)}
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                row[key] = float(value) if math.isfinite(value) else None
            elif hasattr(value, "item"):
                row[key] = float(value.item())
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._writer is not None:
            for key, value in row.items():
                if key != "step" and value is not None:
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete rows of a metrics file (a torn last line from a crash is skipped)."""
    rows = []
    path = Path(path)
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
