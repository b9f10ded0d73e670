"""Shared pieces of the evaluation suites: the run context, per-item and per-suite results, the Q/A suite base.

A suite turns its items into conversations, asks the model (k samples per item when `samples > 1`), scores
every reply with its own metric function, and reports accuracy (mean over samples = pass@1) plus unbiased
pass@k. Multi-turn suites (BFCL, games) override `run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from spade_jax.eval.agent import EvalModel
from spade_jax.eval.metrics import mean, pass_at_k_mean, stderr

__all__ = ["EvalContext", "ItemResult", "QASuite", "SuiteResult"]


@dataclass
class EvalContext:
    """Settings shared by every suite of one evaluation run."""

    samples: int = 1
    max_new_tokens: int = 256
    temperature: float = 0.6  # used only when samples > 1 (k = 1 decodes greedily)
    seed: int = 0
    runner_factory: Callable[[], Any] | None = None  # builds the sandbox runner on first use
    progress: Callable[[str, int, int], None] | None = None  # (suite, done, total)
    options: dict = field(default_factory=dict)  # per-suite knobs, e.g. {"bfcl_max_steps": 5}
    _runner: Any = None

    @property
    def runner(self) -> Any:
        """The sandbox runner (started lazily: suites without untrusted code never start one)."""
        if self._runner is None:
            if self.runner_factory is None:
                from spade_jax.eval.sandboxed import default_runner

                self._runner = default_runner()
            else:
                self._runner = self.runner_factory()
        return self._runner

    def tick(self, suite: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(suite, done, total)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


@dataclass
class ItemResult:
    """Outcome of one item: per-sample pass flags, the (first) prediction, the reference, error if any."""

    id: str
    passed: list[bool]
    prediction: Any = None
    reference: Any = None
    error: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def score(self) -> float:
        return mean([float(p) for p in self.passed])


@dataclass
class SuiteResult:
    """All items of one suite plus its metrics and wall time."""

    suite: str
    items: list[ItemResult]
    metrics: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.items)

    def to_dict(self) -> dict:
        return {
            "suite": self.suite,
            "n": self.n,
            "metrics": self.metrics,
            "wall_s": round(self.wall_s, 3),
            "notes": self.notes,
            "items": [asdict(i) for i in self.items],
        }


def standard_metrics(items: Sequence[ItemResult], samples: int, main: str = "accuracy") -> dict[str, float]:
    """`main` = mean per-item pass rate (pass@1), its standard error, and unbiased pass@k for k in {samples}."""
    scores = [i.score for i in items]
    out = {main: mean(scores), f"{main}_stderr": stderr(scores)}
    if samples > 1:
        flags = [i.passed for i in items if len(i.passed) >= samples]
        out[f"pass@{samples}"] = pass_at_k_mean(flags, samples)
    errors = sum(1 for i in items if i.error)
    if errors:
        out["errors"] = float(errors)
    return out


class QASuite:
    """Single-turn question/answer suite: subclasses give `load`, `conversation` and `score`."""

    name = "qa"
    main_metric = "accuracy"
    stop_strings: tuple[str, ...] = ()

    def load(self, limit: int | None = None, seed: int = 0) -> list[Any]:
        raise NotImplementedError

    def item_id(self, item: Any) -> str:
        return str(item["id"])

    def conversation(self, item: Any) -> list[dict]:
        raise NotImplementedError

    def reference(self, item: Any) -> Any:
        return item.get("answer") if isinstance(item, dict) else None

    def score(self, item: Any, replies: list[str], ctx: EvalContext) -> ItemResult:
        raise NotImplementedError

    def run(self, model: EvalModel, items: list[Any], ctx: EvalContext) -> SuiteResult:
        """Generates k samples per item in batches, scores them, and computes the metrics."""
        start = time.perf_counter()
        k = max(1, ctx.samples)
        temperature = None if k == 1 else ctx.temperature
        convs = [self.conversation(it) for it in items]
        replies: list[list[str]] = [[] for _ in items]
        chunk = max(1, int(ctx.options.get("chunk", 16)))
        done = 0
        for a in range(0, len(items), chunk):
            idx = list(range(a, min(a + chunk, len(items))))
            batch = [convs[i] for i in idx for _ in range(k)]
            out = model.chat(batch, max_new_tokens=ctx.max_new_tokens, stop_strings=self.stop_strings,
                             temperature=temperature, seed=ctx.seed + a)  # fmt: skip
            for j, i in enumerate(idx):
                replies[i] = [r.text for r in out[j * k : (j + 1) * k]]
            done += len(idx)
            ctx.tick(self.name, done // 2, len(items))
        results = []
        for n, (it, rep) in enumerate(zip(items, replies)):
            try:
                res = self.score(it, rep, ctx)
            except Exception as e:  # a scorer failure marks the item, never ends the run
                res = ItemResult(self.item_id(it), [False] * len(rep), rep[0] if rep else None, self.reference(it),
                                 error=f"{type(e).__name__}: {e}")  # fmt: skip
            results.append(res)
            ctx.tick(self.name, (len(items) + n + 1) // 2, len(items))
        return SuiteResult(self.name, results, standard_metrics(results, k, self.main_metric),
                           time.perf_counter() - start)  # fmt: skip
