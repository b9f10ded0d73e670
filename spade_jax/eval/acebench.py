"""ACEBench (normal, single-call-set categories) from user-provided files in the published layout.

The data file is JSON lines with `id`, `question` and `function` (function docs); the answers are in
`possible_answer/<same file name>` next to it, with `ground_truth` as {function: {argument: value}} (or a
list of such dicts). The model answers with `<tool_call>` blocks; an item passes when its set of calls equals
the ground truth (names and arguments, values compared after light normalisation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spade_jax.envs.base import parse_tool_calls
from spade_jax.eval.bfcl_data import render_tools, to_tool_schema
from spade_jax.eval.core import EvalContext, ItemResult, QASuite

__all__ = ["ACEBenchSuite", "calls_match"]


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split()).lower()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    return value


def calls_match(calls: list[dict], truth: Any) -> bool:
    """True when `calls` ([{"name", "arguments"}]) are exactly the ground-truth calls, in any order."""
    wanted = []
    for entry in truth if isinstance(truth, list) else [truth]:
        for name, args in (entry or {}).items():
            wanted.append((name, _norm(args or {})))
    got = [(c["name"], _norm(c.get("arguments") or {})) for c in calls]
    if len(got) != len(wanted):
        return False
    remaining = list(wanted)
    for call in got:
        if call not in remaining:
            return False
        remaining.remove(call)
    return True


def _read_rows(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class ACEBenchSuite(QASuite):
    """One ACEBench data file (e.g. data_normal_single_turn_single_function.json) with its answers."""

    name = "acebench"

    def __init__(self, path: str):
        self.path = Path(path)

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        if not self.path.is_file():
            raise FileNotFoundError(f"ACEBench data file not found: {self.path}")
        answers_path = self.path.parent / "possible_answer" / self.path.name
        if not answers_path.is_file():
            raise FileNotFoundError(f"ACEBench answers not found: {answers_path} (expected next to the data)")
        truth = {row["id"]: row["ground_truth"] for row in _read_rows(answers_path)}
        items = []
        for row in _read_rows(self.path):
            if not {"id", "question", "function"} <= row.keys():
                raise ValueError(f"{self.path}: rows need 'id', 'question' and 'function'")
            if row["id"] in truth:
                items.append({**row, "answer": truth[row["id"]]})
        return items[:limit]

    def conversation(self, item: dict) -> list[dict]:
        tools = render_tools([to_tool_schema(d) for d in item["function"]])
        system = (
            "Call the functions needed to fulfil the user's request. Reply only with one or more "
            '<tool_call>{"name": "<function>", "arguments": {...}}</tool_call> blocks.\n\nFunctions (JSON):\n' + tools
        )
        question = str(item["question"])
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        flags = []
        for reply in replies:
            calls = parse_tool_calls(reply)
            flags.append(all(isinstance(c, dict) for c in calls) and calls_match(calls, item["answer"]))
        return ItemResult(str(item["id"]), flags, replies[0][:2000] if replies else None, item["answer"])
