"""Single-turn answer suites: CHAMP math, reasoning-gym, and user-provided AIME / MATH-500 / GPQA-Diamond files.

Every suite asks for the final answer in `\\boxed{}` and scores it with our own checks (`answers.py`,
`envs/rg_check.py`); the data comes from installed packages or files the user names.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

from spade_jax.envs.pools import RG_TASKS
from spade_jax.envs.rg_check import rg_answer_ok
from spade_jax.eval.answers import choice_letter, final_answer, math_equal
from spade_jax.eval.core import EvalContext, ItemResult, QASuite

__all__ = ["ChampSuite", "GPQASuite", "MathFileSuite", "ReasoningGymSuite", "RG_TASKS", "reasoning_gym_items"]

BOX = "Think step by step, then give only the final answer inside \\boxed{}."


def _math_score(item_id: str, gold: str, replies: list[str]) -> ItemResult:
    preds = [final_answer(r) for r in replies]
    return ItemResult(item_id, [math_equal(p, gold) for p in preds], prediction=preds[0] if preds else None,
                      reference=gold)  # fmt: skip


class ChampSuite(QASuite):
    """CHAMP competition math (`champ-dataset`, 270 problems); answers checked for mathematical equivalence.

    Problems whose reference is a sentence rather than a value (e.g. 'x(n)<y(n-1) for all n>=3') are left out.
    """

    name = "champ"

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        try:
            import champ_dataset
        except ImportError:
            raise FileNotFoundError("champ-dataset is not installed (pip install champ-dataset)") from None
        ds = champ_dataset.load("v0")
        items = []
        for pid, p in ds.problems.items():
            answer = str(p.answer).strip()
            if any(sym in answer for sym in ("<", ">", "≥", "≤", "for all")):
                continue
            items.append({"id": pid, "question": p.text, "answer": answer, "category": p.category})
        return items[:limit]

    def conversation(self, item: dict) -> list[dict]:
        return [{"role": "user", "content": f"{item['question']}\n\n{BOX}"}]

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        return _math_score(item["id"], item["answer"], replies)


class MathFileSuite(QASuite):
    """AIME or MATH-500 style JSONL the user provides: `problem`/`question` and `answer` fields per line."""

    def __init__(self, path: str, name: str = "math_file"):
        self.path, self.name = path, name

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(f"{self.name} file not found: {path}")
        items = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
                question = row.get("problem", row.get("question", row.get("Problem")))
                answer = row.get("answer", row.get("Answer"))
                if question is None or answer is None:
                    raise ValueError(f"{path}:{n}: needs 'problem' (or 'question') and 'answer' fields")
                rid = row.get("unique_id", row.get("id", row.get("ID", f"{path.stem}-{n}")))
                items.append({"id": str(rid), "question": str(question), "answer": str(answer)})
        return items[:limit]

    def conversation(self, item: dict) -> list[dict]:
        return [{"role": "user", "content": f"{item['question']}\n\n{BOX}"}]

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        return _math_score(item["id"], item["answer"], replies)


class GPQASuite(QASuite):
    """GPQA-Diamond from the published CSV (Question, Correct Answer, Incorrect Answer 1-3); choices shuffled
    with a fixed seed per question, the model answers with a letter."""

    name = "gpqa_diamond"

    def __init__(self, path: str):
        self.path = path

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(f"GPQA file not found: {path}")
        need = ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
        items = []
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in need if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: not a GPQA CSV (missing columns: {', '.join(missing)})")
            for n, row in enumerate(reader):
                choices = [row[c].strip() for c in need[1:]]
                order = list(range(4))
                random.Random(f"gpqa:{seed}:{n}").shuffle(order)
                rid = row.get("Record ID") or f"gpqa-{n}"
                items.append({"id": rid, "question": row["Question"].strip(), "choices": [choices[i] for i in order],
                              "answer": "ABCD"[order.index(0)]})  # fmt: skip
        return items[:limit]

    def conversation(self, item: dict) -> list[dict]:
        options = "\n".join(f"({letter}) {text}" for letter, text in zip("ABCD", item["choices"]))
        return [{"role": "user", "content": f"{item['question']}\n\n{options}\n\nThink step by step, then give "
                 "only the letter of the correct choice inside \\boxed{}."}]  # fmt: skip

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        preds = [choice_letter(r) for r in replies]
        return ItemResult(item["id"], [p == item["answer"] for p in preds], preds[0] if preds else None, item["answer"])


# ------------------------------------------------------------------------------------------- reasoning-gym

RG_EVAL_SEED = 9_000_000  # the held-out set; pools.py draws training items from seeds below 1_000_000


def reasoning_gym_items(n: int, seed: int, tasks: tuple[str, ...] = RG_TASKS) -> list[dict]:
    """`n` items cycling through `tasks`, generated by reasoning-gym with seed `seed` + task index."""
    try:
        import reasoning_gym
    except ImportError:
        raise FileNotFoundError("reasoning-gym is not installed (pip install reasoning-gym)") from None
    per_task = -(-n // len(tasks))
    pools = {}
    for t, task in enumerate(tasks):
        ds = reasoning_gym.create_dataset(task, size=per_task, seed=seed + t)
        pools[task] = [ds[i] for i in range(per_task)]
    items = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        entry = pools[task][i // len(tasks)]
        items.append({"id": f"{task}/{i // len(tasks)}", "task": task, "question": entry["question"],
                      "answer": str(entry["answer"])})  # fmt: skip
    return items


class ReasoningGymSuite(QASuite):
    """A fixed, seeded held-out set from 20 reasoning-gym generators, checked by `rg_answer_ok`."""

    name = "reasoning_gym"

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        return reasoning_gym_items(limit or 100, RG_EVAL_SEED + 1000 * seed)

    def conversation(self, item: dict) -> list[dict]:
        return [{"role": "user", "content": f"{item['question']}\n\n{BOX}"}]

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        preds = [final_answer(r) for r in replies]
        return ItemResult(item["id"], [rg_answer_ok(p, item["answer"]) for p in preds], preds[0] if preds else None,
                          item["answer"])  # fmt: skip


def reference_of(item: Any) -> Any:
    return item.get("answer") if isinstance(item, dict) else None
