"""BFCL v4 multi-turn suites: our agent plays each entry turn by turn against BFCL's backends in the sandbox.

Per turn the agent may take several steps; each step's `<tool_call>` blocks become BFCL call strings, run on
the agent's backend instances, and their results come back as the next message(s). Tool format (option
`bfcl_tool_format`): "auto" (default) gives the function schemas to the model's chat template (`tools=`) and
the results as `role: "tool"` messages when the template renders both (`supports_tools` on the model), else,
like "text", lists the schemas as JSON lines in the system prompt and returns results in one user message.
A reply without a tool call ends the turn (as in BFCL), then BFCL's state and response checks run against the
ground truth. Held-out functions (miss_func) join the tool list at their turn with BFCL's own message. An entry
that needs more than `max_steps` steps in a turn is force-terminated and fails, as in BFCL (its limit is 20).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from spade_jax.envs.base import parse_tool_calls
from spade_jax.eval.bfcl_backend import BfclError, BfclSession, ground_truth_steps, score_calls
from spade_jax.eval.bfcl_data import (
    ADD_FUNCTIONS_PROMPT,
    BfclItem,
    call_string,
    function_docs,
    load_bfcl,
    render_tools,
    to_tool_schema,
)
from spade_jax.eval.core import EvalContext, ItemResult, SuiteResult, standard_metrics

__all__ = ["BfclSuite", "INSTRUCTIONS", "SYSTEM_PROMPT", "TOOL_FORMATS", "ground_truth_check"]

INSTRUCTIONS = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, make one or more function calls to achieve the purpose. If none of the functions "
    "can be used, or the question lacks parameters a function needs, say so in plain text.\n"
    'To call functions, reply with one or more blocks <tool_call>{"name": "<function>", "arguments": {...}}'
    "</tool_call>. You will see the results. Keep calling functions until the user's request for this turn is "
    "fulfilled; then reply in plain text without any tool call, which ends the turn."
)
# The system prompt of the textual tool format (the template's tool format sends INSTRUCTIONS and `tools=`).
SYSTEM_PROMPT = INSTRUCTIONS.replace("{", "{{").replace("}", "}}") + "\n\nFunctions (JSON):\n{tools}"
MAX_STEPS = 20  # BFCL's MAXIMUM_STEP_LIMIT
TOOL_FORMATS = ("auto", "text")


@dataclass
class _Play:
    """One entry being played."""

    item: BfclItem
    session: BfclSession | None = None
    messages: list[dict] = field(default_factory=list)
    schemas: list[dict] = field(default_factory=list)
    turn: int = 0
    steps_in_turn: int = 0
    calls: list[list[list[str]]] = field(default_factory=list)
    verdict: dict | None = None
    model_steps: int = 0
    native: bool = False  # the chat template renders the schemas (`tools=`) and the results (`role: "tool"`)


def _held_out(item: BfclItem) -> set[str]:
    return {name for names in item.missed.values() for name in names}


class BfclSuite:
    """One BFCL multi-turn category (`base`, `miss_func`, `miss_param`, `long_context`), accuracy per entry."""

    main_metric = "accuracy"

    def __init__(self, category: str = "base", *, compact_docs: bool | None = None):
        self.category = category
        self.name = f"bfcl_{category}"
        self.compact_docs = compact_docs

    def load(self, limit: int | None = None, seed: int = 0) -> list[BfclItem]:
        return load_bfcl(self.category, limit)

    # ------------------------------------------------------------------------------------------- playing
    def _start(self, play: _Play, ctx: EvalContext) -> None:
        item = play.item
        compact = ctx.options.get("bfcl_compact_docs", False) if self.compact_docs is None else self.compact_docs
        hidden = _held_out(item)
        docs = [d for d in function_docs(item.involved_classes) if d["name"] not in hidden]
        play.schemas = [to_tool_schema(d, compact=compact) for d in docs]
        system = INSTRUCTIONS if play.native else SYSTEM_PROMPT.format(tools=render_tools(play.schemas))
        play.messages = [{"role": "system", "content": system}]
        play.session = BfclSession(ctx.runner, item)
        self._open_turn(play, compact)

    def _open_turn(self, play: _Play, compact: bool) -> None:
        item = play.item
        play.calls.append([])
        play.steps_in_turn = 0
        if play.turn in item.missed:
            names = set(item.missed[play.turn])
            new = [
                to_tool_schema(d, compact=compact) for d in function_docs(item.involved_classes) if d["name"] in names
            ]
            play.schemas += new  # the template's tool format shows them in the next render's tool list
            text = ADD_FUNCTIONS_PROMPT if play.native else f"{render_tools(new)}\n{ADD_FUNCTIONS_PROMPT}"
            play.messages.append({"role": "user", "content": text})
        else:
            play.messages += [{"role": m["role"], "content": m["content"]} for m in item.turns[play.turn]]

    def _end_turn(self, play: _Play, ctx: EvalContext) -> None:
        verdict = play.session.end_turn(play.item.ground_truth[play.turn])
        play.turn += 1
        if not verdict.get("valid"):
            play.verdict = verdict
        elif play.turn >= len(play.item.ground_truth):
            play.verdict = {"valid": True}
        else:
            self._open_turn(play, ctx.options.get("bfcl_compact_docs", False))

    def _apply_reply(self, play: _Play, text: str, finish: str, ctx: EvalContext, max_steps: int) -> None:
        play.model_steps += 1
        play.messages.append({"role": "assistant", "content": text})
        parsed = parse_tool_calls(text)
        calls, problems = [], []
        for p in parsed:
            if isinstance(p, str):
                problems.append(p)
                continue
            try:
                calls.append(call_string(p["name"], p["arguments"]))
            except ValueError as e:
                problems.append(str(e))
        if finish == "context":
            play.verdict = {"valid": False, "error_type": "context", "message": "conversation outgrew the context"}
            return
        if not calls:  # BFCL: an empty or undecodable step ends the turn
            self._end_turn(play, ctx)
            return
        play.steps_in_turn += 1
        if play.steps_in_turn > max_steps:
            play.verdict = {"valid": False, "error_type": "multi_turn:force_terminated",
                            "message": f"more than {max_steps} steps in turn {play.turn}"}  # fmt: skip
            return
        results = play.session.execute(calls)
        play.calls[-1].append(calls)
        if play.native:  # one tool message per call, in call order, as the template expects
            outputs = [str(r) for r in results] + [f"(not run: {p})" for p in problems]
            play.messages += [{"role": "tool", "content": out} for out in outputs]
            return
        lines = [f"{c} -> {r}" for c, r in zip(calls, results)] + [f"(not run: {p})" for p in problems]
        play.messages.append({"role": "user", "content": "<tool_response>\n" + "\n".join(lines) + "\n</tool_response>"})

    def run(self, model: Any, items: list[BfclItem], ctx: EvalContext) -> SuiteResult:
        """Plays the entries in waves as wide as the sandbox pool (each live entry holds one worker)."""
        start = time.perf_counter()
        native = native_tools(model, ctx.options.get("bfcl_tool_format", "auto"))
        width = int(ctx.options.get("bfcl_concurrency") or getattr(ctx.runner, "capacity", 8))
        plays = [_Play(it, native=native) for it in items]
        for a in range(0, len(plays), max(1, width)):
            self._play_wave(model, plays[a : a + width], ctx, done_before=a, total=len(plays))
        results = []
        for p in plays:
            v = p.verdict or {}
            results.append(
                ItemResult(
                    p.item.id,
                    [bool(v.get("valid"))],
                    prediction=json.dumps(p.calls)[:4000],
                    reference=json.dumps(p.item.ground_truth)[:4000],
                    error=v.get("message") if v.get("error_type") == "sandbox" else None,
                    extra={"error_type": v.get("error_type"), "turn": v.get("turn"), "model_steps": p.model_steps},
                )
            )
        metrics = standard_metrics(results, 1, self.main_metric)
        return SuiteResult(self.name, results, metrics, time.perf_counter() - start)

    def _play_wave(self, model: Any, plays: list[_Play], ctx: EvalContext, done_before: int, total: int) -> None:
        """Plays entries together: one model call per round for every entry still playing."""
        max_steps = int(ctx.options.get("bfcl_max_steps", MAX_STEPS))
        max_rounds = int(ctx.options.get("bfcl_max_rounds", 10_000))
        threads = ThreadPoolExecutor(max_workers=4)
        try:
            for play, err in zip(plays, threads.map(lambda p: _safe(self._start, p, ctx), plays)):
                if err:
                    play.verdict = {"valid": False, "error_type": "sandbox", "message": err}
            rounds = 0
            while True:
                live = [p for p in plays if p.verdict is None]
                ctx.tick(self.name, done_before + len(plays) - len(live), total)
                if not live:
                    break
                rounds += 1
                if rounds > max_rounds:
                    for p in live:
                        p.verdict = {"valid": False, "error_type": "round_limit", "message": "round limit reached"}
                    break
                tools = {"tools": [p.schemas for p in live]} if any(p.native for p in live) else {}
                replies = model.chat([p.messages for p in live], max_new_tokens=ctx.max_new_tokens,
                                     stop_strings=(), seed=ctx.seed + rounds, **tools)  # fmt: skip
                errs = threads.map(lambda a: _safe(self._apply_reply, a[0], a[1].text, a[1].finish_reason, ctx,
                                                   max_steps), zip(live, replies))  # fmt: skip
                for p, err in zip(live, errs):
                    if err and p.verdict is None:
                        p.verdict = {"valid": False, "error_type": "sandbox", "message": err}
        finally:
            for p in plays:
                if p.session is not None:
                    p.session.close()
            threads.shutdown(wait=True)


def native_tools(model: Any, tool_format: str = "auto") -> bool:
    """True when the suite plays in the template's tool format: `tool_format` "auto" and a model whose chat
    template renders tools (`supports_tools`); "text" is always False. Any other value is an error."""
    if tool_format not in TOOL_FORMATS:
        raise ValueError(f"bfcl_tool_format={tool_format!r}; expected one of {TOOL_FORMATS}")
    return tool_format == "auto" and bool(getattr(model, "supports_tools", False))


def _safe(fn, *args) -> str | None:
    """Runs fn; a sandbox failure becomes a message instead of an exception."""
    try:
        fn(*args)
        return None
    except BfclError as e:
        return str(e)


def ground_truth_check(runner: Any, category: str = "base", limit: int | None = None, *, wrong: bool = False) -> dict:
    """Scores BFCL's own ground truth (or, with `wrong`, a corrupted copy) for a category: counts and failures.

    The corruption drops the last call of the last non-empty turn, which must fail the state or response check.
    """
    items = load_bfcl(category, limit)
    passed, failures = 0, []
    for item in items:
        steps = ground_truth_steps(item)
        if wrong:
            last = max(i for i, s in enumerate(steps) if s)
            steps[last] = [steps[last][0][:-1]] if len(steps[last][0]) > 1 else []
        verdict = score_calls(runner, item, steps)
        if verdict.get("valid"):
            passed += 1
        else:
            failures.append({"id": item.id, **{k: verdict.get(k) for k in ("error_type", "turn", "message")}})
    return {"category": category, "total": len(items), "passed": passed, "failures": failures}
