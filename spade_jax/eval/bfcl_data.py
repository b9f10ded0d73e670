"""BFCL v4 multi-turn data from the installed `bfcl-eval` package: entries, ground truth, function docs.

Reads the package's files directly (never imports `bfcl_eval`, whose import pulls its heavy dependencies).
Also converts BFCL function docs to OpenAI-style tool schemas and tool calls to BFCL call strings.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "BfclItem",
    "bfcl_root",
    "call_string",
    "function_docs",
    "load_bfcl",
    "render_tools",
    "to_tool_schema",
]

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
ADD_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"  # BFCL's text


@dataclass
class BfclItem:
    """One multi-turn entry: user turns, backend config, held-out functions per turn, ground-truth calls."""

    id: str
    category: str
    turns: list[list[dict]]
    initial_config: dict
    involved_classes: list[str]
    ground_truth: list[list[str]]
    missed: dict[int, list[str]] = field(default_factory=dict)

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category


def bfcl_root() -> Path:
    """Folder of the installed bfcl_eval package; a clear error when it is missing."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("bfcl-eval is not installed (pip install --no-deps bfcl-eval)")
    return Path(next(iter(spec.submodule_search_locations)))


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_bfcl(category: str = "base", limit: int | None = None) -> list[BfclItem]:
    """Entries of `multi_turn_<category>` joined with their ground truth, in file order."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}; known: {', '.join(CATEGORIES)}")
    data = bfcl_root() / "data"
    name = f"BFCL_v4_multi_turn_{category}.json"
    entries = _jsonl(data / name)
    truth = {row["id"]: row["ground_truth"] for row in _jsonl(data / "possible_answer" / name)}
    items = []
    for e in entries[: limit if limit is not None else None]:
        items.append(
            BfclItem(
                id=e["id"],
                category=f"multi_turn_{category}",
                turns=e["question"],
                initial_config=e.get("initial_config", {}),
                involved_classes=list(e["involved_classes"]),
                ground_truth=truth[e["id"]],
                missed={int(k): list(v) for k, v in (e.get("missed_function") or {}).items()},
            )
        )
    return items


@cache
def _docs_for(class_name: str) -> tuple[dict, ...]:
    if class_name not in DOC_FILES:
        raise ValueError(f"unknown BFCL class {class_name!r}")
    return tuple(_jsonl(bfcl_root() / "data" / "multi_turn_func_doc" / DOC_FILES[class_name]))


def function_docs(classes: list[str]) -> list[dict]:
    """BFCL function docs of the involved classes, in BFCL's order."""
    return [dict(d) for c in classes for d in _docs_for(c)]


_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
_BOILERPLATE = re.compile(r"^This tool belongs to .*?Tool description:\s*", re.S)


def _convert(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_convert(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "type" and isinstance(v, str):
            mapped = _TYPES.get(v, v)
            if mapped is not None:
                out[k] = mapped
        elif k == "properties" and isinstance(v, dict):
            out[k] = {p: _convert(s) for p, s in v.items()}
        else:
            out[k] = _convert(v)
    return out


def to_tool_schema(doc: dict, *, compact: bool = False) -> dict:
    """A BFCL doc as an OpenAI-style function schema (BFCL's 'dict'/'float'/'tuple' types mapped to JSON Schema).

    `compact` drops the class boilerplate from descriptions and the parameter descriptions (for small contexts).
    """
    desc = doc.get("description", "")
    params = _convert(doc.get("parameters", {"type": "dict", "properties": {}}))
    if compact:
        desc = _BOILERPLATE.sub("", desc).split(". ")[0].strip().rstrip(".") + "."
        params = {
            "type": "object",
            "properties": {
                p: {k: v for k, v in s.items() if k in ("type", "enum", "items")}
                for p, s in params.get("properties", {}).items()
            },
            "required": params.get("required", []),
        }
    return {"type": "function", "function": {"name": doc["name"], "description": desc, "parameters": params}}


def render_tools(schemas: list[dict]) -> str:
    """One JSON line per function schema (the format the agent prompt shows)."""
    return "\n".join(json.dumps(s["function"], separators=(",", ":")) for s in schemas)


def call_string(name: str, arguments: dict) -> str:
    """A tool call as the Python call string BFCL's executor and checker work with."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name or ""):
        raise ValueError(f"invalid function name {name!r}")
    parts = []
    for key, value in arguments.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", str(key)):
            raise ValueError(f"invalid argument name {key!r}")
        parts.append(f"{key}={value!r}")
    return f"{name}({', '.join(parts)})"
