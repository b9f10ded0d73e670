"""Suite names, aliases and the evaluation run: `evaluate(model, "code,math", ...)` -> a JSON-ready dict.

Shipped suites read data from installed packages; file suites take a path (`gpqa=FILE.csv`). Each suite's
wall time is measured and reported with its metrics.
"""

from __future__ import annotations

import datetime
import json
import platform
from pathlib import Path
from typing import Any

from spade_jax.eval.core import EvalContext, SuiteResult

__all__ = ["ALIASES", "FILE_SUITES", "SHIPPED", "evaluate", "make_suite", "resolve_suites", "write_results"]

SHIPPED = (
    "humaneval",
    "champ",
    "reasoning_gym",
    "bfcl_base",
    "bfcl_miss_func",
    "bfcl_miss_param",
    "bfcl_long_context",
    "textarena",
)
ALIASES = {
    "code": ("humaneval",),
    "math": ("champ",),
    "reasoning": ("reasoning_gym",),
    "tool": ("bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context"),
    "bfcl": ("bfcl_base", "bfcl_miss_func", "bfcl_miss_param", "bfcl_long_context"),
    "games": ("textarena",),
    "all": SHIPPED,
}
FILE_SUITES = ("aime", "math500", "gpqa", "livecodebench", "acebench", "pool")


def make_suite(name: str) -> Any:
    """The suite object for a shipped name or `file_suite=PATH`; ValueError naming the known suites otherwise."""
    if "=" in name:
        kind, path = name.split("=", 1)
        if kind in ("aime", "math500"):
            from spade_jax.eval.qa_suites import MathFileSuite

            return MathFileSuite(path, name=kind)
        if kind == "gpqa":
            from spade_jax.eval.qa_suites import GPQASuite

            return GPQASuite(path)
        if kind == "livecodebench":
            from spade_jax.eval.code_suites import LiveCodeBenchSuite

            return LiveCodeBenchSuite(path)
        if kind == "pool":
            from spade_jax.eval.pool_suite import PoolSuite

            return PoolSuite(path)
        if kind == "acebench":
            from spade_jax.eval.acebench import ACEBenchSuite

            return ACEBenchSuite(path)
        raise ValueError(f"unknown file suite {kind!r}; file suites: {', '.join(FILE_SUITES)} (as NAME=PATH)")
    if name == "humaneval":
        from spade_jax.eval.code_suites import HumanEvalSuite

        return HumanEvalSuite()
    if name == "champ":
        from spade_jax.eval.qa_suites import ChampSuite

        return ChampSuite()
    if name == "reasoning_gym":
        from spade_jax.eval.qa_suites import ReasoningGymSuite

        return ReasoningGymSuite()
    if name.startswith("bfcl_"):
        from spade_jax.eval.bfcl import BfclSuite
        from spade_jax.eval.bfcl_data import CATEGORIES

        if name[len("bfcl_") :] in CATEGORIES:
            return BfclSuite(name[len("bfcl_") :])
    if name == "textarena":
        from spade_jax.eval.games import GamesSuite

        return GamesSuite()
    known = ", ".join([*SHIPPED, *ALIASES])
    raise ValueError(
        f"unknown suite {name!r}; known: {known}; file suites: {', '.join(f + '=PATH' for f in FILE_SUITES)}"
    )


def resolve_suites(spec: str) -> list[str]:
    """'code,math' -> ['humaneval', 'champ'] (aliases expanded, order kept, duplicates dropped)."""
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        for name in ALIASES.get(part, (part,)):
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError("no suite given (e.g. --suite code,math or --suite all)")
    for name in names:
        if "=" not in name and name not in SHIPPED:
            make_suite(name)  # raises the clear error
    return names


def evaluate(model: Any, suites: list[str], ctx: EvalContext, *, limit: int | None = None, on_suite=None) -> dict:
    """Runs each suite on `limit` items; returns {"model", "created", "settings", "suites": {name: result}}."""
    out = {
        "model": getattr(model, "name", "model"),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "settings": {
            "limit": limit,
            "samples": ctx.samples,
            "max_new_tokens": ctx.max_new_tokens,
            "temperature": ctx.temperature if ctx.samples > 1 else 0.0,
            "seed": ctx.seed,
            "options": ctx.options,
        },
        "suites": {},
    }
    try:
        for name in suites:
            suite = make_suite(name)
            items = suite.load(limit, ctx.seed)
            result: SuiteResult = suite.run(model, items, ctx)
            if getattr(ctx, "_runner", None) is not None:
                result.notes.append(f"sandbox: {ctx.runner.level}")
            key = name.split("=", 1)[0]
            out["suites"][key] = result.to_dict()
            if on_suite is not None:
                on_suite(key, result)
    finally:
        ctx.close()
    return out


def write_results(results: dict, path: str | Path) -> Path:
    """Writes the results JSON (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    return path


def load_results(path: str | Path) -> dict:
    """Reads a results JSON written by `write_results`; one clear error when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("suites"), dict):
        raise ValueError(f"{path}: not a spade-jax eval results file (no 'suites')")
    return data
