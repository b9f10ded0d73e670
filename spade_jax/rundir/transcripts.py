"""The agent's plays as the report shows them: `transcripts.jsonl` in the run directory, one row per environment,
condition (hinted, unhinted) and step, with the whole conversation as text (the chat template's role markers kept,
so the reader sees where the environment speaks and where the agent does).

Rows come from `SelfPlayBatch.examples` (the first kept play of each environment in each condition). A text longer
than `MAX_CHARS` keeps its beginning and end. On a resume the rows after the restored step are dropped (they are
redone), as metrics.jsonl's are. Writing is best-effort: a failure is one warning line and the run goes on.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("spade_jax")

__all__ = ["FILE", "MAX_CHARS", "read", "record", "trim"]

FILE = "transcripts.jsonl"
MAX_CHARS = 12_000


def _cut(text: str, n: int = MAX_CHARS) -> str:
    if len(text) <= n:
        return text
    return text[: n // 2] + f"\n[... {len(text) - n} characters left out ...]\n" + text[-n // 2 :]


def record(run_dir: str | Path, tokenizer: Any, step: int, examples: list[dict[str, Any]]) -> int:
    """Appends the step's example plays, decoded; returns how many rows were written."""
    rows = []
    for ex in examples:
        ids = list(ex.get("prompt_ids", ())) + list(ex.get("completion_ids", ()))
        try:
            text = tokenizer.decode(ids)
        except Exception as e:  # a tokenizer that cannot decode some id: the play is left out, the run goes on
            log.warning("transcripts: play of %s not decoded (%s)", ex.get("env_id"), e)
            continue
        keep = {k: ex[k] for k in ("env_id", "condition", "return", "won", "turns", "end") if k in ex}
        rows.append({"step": int(step), **keep, "text": _cut(text)})
    if rows:
        try:
            with (Path(run_dir) / FILE).open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        except OSError as e:
            log.warning("transcripts: not written (%s)", e)
            return 0
    return len(rows)


def trim(run_dir: str | Path, last_step: int) -> None:
    """Drops the rows of steps after `last_step` (a resume redoes them) and any line cut short by a crash."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= last_step:
            kept.append(line + "\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    tmp.replace(path)


def read(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every whole row of the run's transcripts (none when the file is missing)."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
