"""Parsing an agent's reply: `\\boxed{...}` answers, `<tool_call>` blocks and `<answer>` tags.

STANDARD LIBRARY ONLY: imported inside the sandbox through `spade_jax.envs.base` (which re-exports every name
here, the names generated environments use). Malformed input gives None or a one-line error string, never an
exception, except `parse_tool_call`, which raises ValueError with that line.
"""

from __future__ import annotations

import json
import re

__all__ = [
    "TOOL_CLOSE",
    "TOOL_OPEN",
    "canonical_action",
    "extract_answer",
    "extract_boxed",
    "parse_tool_call",
    "parse_tool_calls",
    "reference_boxed_answer",
]


_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_WRAPPER_RE = re.compile(r"^\\(?:text|textbf|mathrm|mathtt|texttt)\s*\{(.*)\}$", re.S)


def _balanced(text: str, start: int) -> int | None:
    """Index of the `}` closing the `{` just before `start`, or None when unbalanced."""
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the LAST complete `\\boxed{...}` in `text` (nested braces allowed), stripped.

    A whole-content `\\text{...}` wrapper is removed. Returns None when there is no complete box.
    """
    if not isinstance(text, str):
        return None
    found = None
    for m in _BOXED_RE.finditer(text):
        end = _balanced(text, m.end())
        if end is not None:
            found = text[m.end() : end]
    if found is None:
        return None
    found = found.strip()
    while True:
        w = _WRAPPER_RE.match(found)
        if not w or _balanced(found, found.index("{") + 1) != len(found) - 1:
            return found
        found = w.group(1).strip()


# The reference's reading of a reply (spade/core/utils/parsing.py), kept for runs that must match it: the FIRST
# box whose content has no braces (then `{{x}}`, then `{{{x}}}`), else the LAST box with balanced braces, with
# up to two whole-content brace pairs removed.
_REF_FLAT_RES = tuple(re.compile(r"\\boxed" + r"\{" * n + r"([^{}]+)" + r"\}" * n) for n in (1, 2, 3))


def reference_boxed_answer(text: str) -> str | None:
    """The boxed answer as the reference reads it (None when there is none); see `extract_boxed` for ours."""
    if not isinstance(text, str) or not text:
        return None
    for pattern in _REF_FLAT_RES:
        m = pattern.search(text)
        if m:
            return m.group(1).strip()
    last = text.rfind("\\boxed")
    brace = text.find("{", last) if last >= 0 else -1
    if brace < 0:
        return None
    end = _balanced(text, brace + 1)
    if end is None:
        return None
    content = text[brace + 1 : end].strip()
    for _ in range(2):
        if content.startswith("{") and content.endswith("}"):
            content = content[1:-1].strip()
    return content


def canonical_action(text: str) -> str:
    """What the reference passes to step(): `\\boxed{answer}` when the reply has a non-empty boxed answer,
    else the stripped reply."""
    answer = reference_boxed_answer(text)
    return f"\\boxed{{{answer}}}" if answer else (text or "").strip()


TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"
_ANSWER_RE = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)


def parse_tool_calls(text: str) -> list[dict | str]:
    """All `<tool_call>...</tool_call>` blocks in order; each is {"name", "arguments"} or an error string.

    The closing tag may be missing on the last block (generation stopped at it). `arguments` may be a
    JSON object or a JSON-encoded string (OpenAI style); `parameters` is accepted as an alias.
    """
    out: list[dict | str] = []
    pos = 0
    while True:
        start = text.find(TOOL_OPEN, pos)
        if start < 0:
            return out
        body_start = start + len(TOOL_OPEN)
        end = text.find(TOOL_CLOSE, body_start)
        nxt = text.find(TOOL_OPEN, body_start)
        if end < 0 or (0 <= nxt < end):
            end = nxt if nxt >= 0 else len(text)
            pos = end
        else:
            pos = end + len(TOOL_CLOSE)
        out.append(_parse_one_call(text[body_start:end].strip()))


def _parse_one_call(body: str) -> dict | str:
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", body)
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return f"tool call is not valid JSON ({e.msg} at char {e.pos})"
    if not isinstance(obj, dict):
        return "tool call must be a JSON object with 'name' and 'arguments'"
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return "tool call has no string 'name'"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return f"arguments of '{name}' are not a JSON object"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"arguments of '{name}' must be a JSON object"
    return {"name": name, "arguments": args}


def parse_tool_call(text: str) -> dict | None:
    """The first tool call in `text` as {"name", "arguments"}; None if there is no `<tool_call>` tag.

    Raises ValueError with a one-line reason when the first block is malformed.
    """
    calls = parse_tool_calls(text) if isinstance(text, str) else []
    if not calls:
        return None
    if isinstance(calls[0], str):
        raise ValueError(calls[0])
    return calls[0]


def extract_answer(text: str) -> str | None:
    """Content of the first `<answer>...</answer>` (closing tag optional), stripped; None if absent."""
    m = _ANSWER_RE.search(text) if isinstance(text, str) else None
    return m.group(1).strip() if m else None
