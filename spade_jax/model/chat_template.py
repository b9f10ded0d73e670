"""Render a model's Jinja chat template in the environment `transformers` uses, so prompt strings are identical.

Sandboxed Jinja with trim_blocks / lstrip_blocks, loop controls, `raise_exception`, `strftime_now`, a `tojson`
that does not HTML-escape, and a pass-through `{% generation %}` block.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Names a message's reasoning text goes by; templates read the first (transformers fills all of them).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for masks; here it renders its body as is."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def compile_chat_template(template: str) -> jinja2.Template:
    """Compiles (and caches) a chat template; a broken template raises ValueError naming the problem."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"chat template does not parse: {e.message} (line {e.lineno})") from e


def _alias_reasoning(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Deep-copies the messages and spreads a reasoning field over all its names, as transformers does."""
    out = []
    for message in messages:
        m = copy.deepcopy(dict(message))
        reasoning = next((m[k] for k in _REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """The string `template` renders for `messages` (plus tools, special tokens and any template kwargs)."""
    for m in messages:
        if not isinstance(m, Mapping):
            raise TypeError(f"chat messages must be dicts, got {m!r}")
    return compile_chat_template(template).render(
        messages=_alias_reasoning(messages),
        tools=None if tools is None else copy.deepcopy(list(tools)),
        documents=None if documents is None else copy.deepcopy(list(documents)),
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )


# A probe conversation for `renders_tools`: a dummy tool schema and a tool result no template would write itself.
_PROBE_TOOL_NAME = "spade_probe_tool_7f3a"
_PROBE_RESULT = "spade-probe-result-7f3a"
_PROBE_TOOLS = (
    {
        "type": "function",
        "function": {
            "name": _PROBE_TOOL_NAME,
            "description": "Probe.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        },
    },
)
_PROBE_MESSAGES = (
    {"role": "user", "content": "probe"},
    {"role": "assistant", "content": "probe"},
    {"role": "tool", "content": _PROBE_RESULT},
)


@lru_cache(maxsize=64)
def renders_tools(template: str, specials: tuple[tuple[str, str], ...] = ()) -> bool:
    """True when `template` renders tool schemas passed as `tools=` AND `role: "tool"` messages: a probe
    conversation with a dummy tool and a tool result must show both. A template that ignores either (e.g. plain
    ChatML) or fails on them is False. Cached per (template, special tokens)."""
    try:
        text = render_chat_template(template, _PROBE_MESSAGES, tools=_PROBE_TOOLS, **dict(specials))
    except Exception:  # a template that raises on tools or tool messages does not support them
        return False
    return _PROBE_TOOL_NAME in text and _PROBE_RESULT in text
