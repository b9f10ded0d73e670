"""Terminal progress for long runs: a rich bar over steps plus the phase in progress and its key numbers; each
finished phase is logged with its seconds and how many of them went to compiling (infra/compile_time.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spade_jax.infra.compile_time import compile_seconds

# Metrics shown after each step, when present (short label -> metric name).
SHOWN = {
    "valid": "design/valid_frac",
    "regret": "env/regret_mean",  # at the steps that close a design round
    "win(no hint)": "rollout/win_rate_no_hint",
    "win(hint)": "rollout/win_rate_hint",
    "learnable": "health/learnable_frac",  # share of the scored environments in [0.2, 0.8] (selfplay/health.py)
    "trained agent": "train/agent_samples",
    "designer": "train/designer_samples",
    "loss": "train/loss",
    "eval": "eval/win_rate",
}


class StepProgress:
    """`with progress.phase("..."):` shows what runs now; `advance(metrics)` ticks the step bar."""

    def __init__(self, steps: int, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[phase]}"),
            console=self.console,
            transient=False,
        )
        self._task = self._progress.add_task("self-play", total=steps, phase="")
        self._started = False

    def start(self, completed: int = 0) -> None:
        self._progress.update(self._task, completed=completed)
        if not self._started:
            self._progress.start()
            self._started = True

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self._started:
            self.start()
        self._progress.update(self._task, phase=name)
        t0, c0 = time.perf_counter(), compile_seconds()
        try:
            yield
        finally:
            self._progress.update(self._task, phase="")
            compiling = compile_seconds() - c0
            of_which = f", {compiling:.1f}s of it compiling" if compiling > 0 else ""
            self.console.log(f"{name} [dim]({time.perf_counter() - t0:.1f}s{of_which})[/dim]")

    def advance(self, metrics: dict[str, Any]) -> None:
        shown = [f"{label}={metrics[key]:.3g}" for label, key in SHOWN.items() if metrics.get(key) is not None]
        if shown:
            self.console.log("  " + "  ".join(shown))
        self._progress.advance(self._task)

    def stop(self) -> None:
        if self._started:
            self._progress.stop()
            self._started = False
