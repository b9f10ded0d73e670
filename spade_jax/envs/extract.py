"""Pulls the environment source out of a designer completion (fenced blocks, bare code, truncation).

Pure standard library. `extract_source` returns the code or raises `ExtractError` with a one-line reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["CodeBlock", "ExtractError", "extract_source", "find_blocks", "try_extract"]

PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3", "python 3", "ipython"})
_FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*$")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# A line that starts Python code (used to find code in an unfenced completion).
_CODE_START_RE = re.compile(
    r"^(?:from\s+[\w.]+\s+import\b|import\s+\w|class\s+\w+\s*[(:]|def\s+\w+\s*\(|@\w|async\s+def\s)"
)
_FIRST_CODE_RE = re.compile(r"^(?:#|\"\"\"|\'\'\'|[A-Za-z_]\w*\s*(?::[^=]+)?=[^=])")
_ENV_HINT_RE = re.compile(r"^\s*class\s+\w+", re.M)


class ExtractError(ValueError):
    """No usable source in the completion; the message is a one-line reason."""


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its language tag, text, first line number, and whether its fence was closed."""

    lang: str
    code: str
    line: int
    closed: bool

    @property
    def is_python(self) -> bool:
        """True for ```python / ```py / untagged fences."""
        return self.lang.lower() in PYTHON_TAGS


def _strip_think(text: str) -> str:
    """Drops `<think>...</think>` reasoning; raises when the completion ends inside it."""
    while _THINK_OPEN in text:
        start = text.index(_THINK_OPEN)
        end = text.find(_THINK_CLOSE, start)
        if end < 0:
            raise ExtractError("completion ends inside <think> (output truncated before any code)")
        text = text[:start] + text[end + len(_THINK_CLOSE) :]
    if _THINK_CLOSE in text:  # chat templates often open <think> in the prompt: keep what follows
        text = text[text.rindex(_THINK_CLOSE) + len(_THINK_CLOSE) :]
    return text


def find_blocks(text: str) -> list[CodeBlock]:
    """All fenced code blocks (``` or ~~~, any tag), in order; the last may be unclosed."""
    blocks: list[CodeBlock] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).strip()
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            close = _FENCE_RE.match(lines[j])
            if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                if not close.group(2):
                    closed = True
                    break
            body.append(lines[j])
            j += 1
        blocks.append(CodeBlock(lang=lang, code="\n".join(body).strip("\n") + "\n", line=i + 1, closed=closed))
        i = j + 1
    return blocks


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _env_classes(tree: ast.Module) -> list[str]:
    """Top-level classes that look like environments: reset+step methods, or a base class of their own."""
    names = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if {"reset", "step"} <= methods or (node.bases and methods & {"setup", "play", "handle", "check_answer"}):
            names.append(node.name)
    return names


def _defines_env(code: str) -> bool:
    tree = _parse(code)
    if tree is not None:
        return bool(_env_classes(tree))
    # Unparseable: judge by text so the static gate can report the syntax error on the right block.
    return bool(_ENV_HINT_RE.search(code)) and ("def reset" in code or "def setup" in code)


def _defined_names(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _used_names(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _join_helpers(main: CodeBlock, others: list[CodeBlock]) -> str:
    """The main block, preceded by earlier python blocks that define names it uses but lacks."""
    tree = _parse(main.code)
    if tree is None:
        return main.code
    missing = _used_names(tree) - _defined_names(tree)
    helpers: list[str] = []
    for block in others:
        btree = _parse(block.code)
        if btree is None or _env_classes(btree):
            continue
        provides = _defined_names(btree) & missing
        if provides and not _looks_like_usage(btree):
            helpers.append(block.code)
            missing -= provides
    return "\n\n".join([*helpers, main.code]) if helpers else main.code


def _looks_like_usage(tree: ast.Module) -> bool:
    """True for demo blocks (mostly calls/expressions at top level) rather than definitions."""
    stmts = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom)]
    defs = [n for n in stmts if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign)]
    return len(defs) * 2 < len(stmts)


def _from_fences(blocks: list[CodeBlock]) -> str:
    py = [b for b in blocks if b.is_python and b.code.strip()]
    env_blocks = [b for b in py if _defines_env(b.code)]
    if not env_blocks:
        unclosed = [b for b in blocks if not b.closed]
        if unclosed:
            raise ExtractError(
                f"code fence opened at line {unclosed[-1].line} is never closed and no complete block "
                "defines an environment class (output truncated?)"
            )
        if not py:
            tags = sorted({b.lang or "untagged" for b in blocks})
            raise ExtractError(f"no Python code block (found {len(blocks)} block(s) tagged {', '.join(tags)})")
        raise ExtractError(
            f"none of the {len(py)} Python code block(s) defines an environment class with reset()/step()"
        )
    main = env_blocks[-1]  # when the model rewrites its environment, the last version is the final one
    if not main.closed:
        raise ExtractError(
            f"code block opened at line {main.line} is never closed: the output was truncated "
            f"({len(main.code.splitlines())} lines received)"
        )
    earlier = [b for b in py if b.line < main.line and b.closed]
    return _join_helpers(main, earlier)


def _from_bare_text(text: str) -> str:
    if _parse(text) is not None and text.strip():
        return text
    lines = text.split("\n")
    first = next((line for line in lines if line.strip() and not line.lstrip().startswith("#")), "")
    if _CODE_START_RE.match(first) or _FIRST_CODE_RE.match(first):
        return text.strip("\n") + "\n"  # it is all code (with a syntax error the static gate will name)
    start = next((i for i, line in enumerate(lines) if _CODE_START_RE.match(line)), None)
    if start is None:
        raise ExtractError("no Python code found (no ``` code block and no import/class/def lines)")
    # Keep leading comment lines right above the first code line (headers belong to the program).
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    code_lines = lines[start:]
    # Trim trailing prose (unindented lines that are not Python on their own) and blank lines.
    end = len(code_lines)
    while end > 0 and (not code_lines[end - 1].strip() or _is_prose(code_lines[end - 1])):
        end -= 1
    return "\n".join(code_lines[:end]).rstrip() + "\n"


def _is_prose(line: str) -> bool:
    """An unindented line that cannot be a line of Python (e.g. 'This environment tests memory.')."""
    if line[:1].isspace() or line.lstrip()[:1] in ("#", "@", ")", "]", "}", '"', "'"):
        return False
    return _parse(line) is None and not line.rstrip().endswith((":", "(", "[", "{", ",", "\\"))


def extract_source(completion: str) -> str:
    """Environment source from a designer completion; raises ExtractError with a one-line reason."""
    if not isinstance(completion, str):
        raise ExtractError(f"completion must be a str, got {type(completion).__name__}")
    if not completion.strip():
        raise ExtractError("completion is empty")
    text = _strip_think(completion.replace("\r\n", "\n"))
    if not text.strip():
        raise ExtractError("completion has only <think> reasoning and no code")
    blocks = find_blocks(text)
    if blocks:
        return _from_fences(blocks)
    return _from_bare_text(text)


def try_extract(completion: str) -> tuple[str | None, str]:
    """(source, "") on success, (None, reason) on failure."""
    try:
        return extract_source(completion), ""
    except ExtractError as e:
        return None, str(e)
