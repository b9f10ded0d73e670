"""Novelty against the memory: rejects an environment whose code is a near-duplicate of an archived one.

Two views of a program, both pure standard library:
- structure: the AST in preorder with user-chosen identifiers, literals and docstrings canonicalised, so
  renaming variables or changing constants does not hide a copy; an exact digest plus k-gram shingles;
- text: k-grams of the code's tokens with comments removed, which catches copies that were restructured
  but kept their names and messages.
A candidate is a duplicate when either Jaccard similarity to some archived program reaches its threshold.

Parameter variants (`max_param_variants > 0`): a duplicate whose difficulty constants (numeric
`UPPER_CASE = <number>` assignments at module and class level) differ from those of every archived program
it duplicates is accepted as a variant of that family, while the family holds at most `max_param_variants`
programs. This is ACCEL's edit of what already works (the same game at another size or budget); renaming,
reordering or changing other literals is still a copy. Off (0) by default.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import io
import re
import tokenize
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from spade_jax.config.gates import NoveltyConfig

__all__ = ["Fingerprint", "NoveltyConfig", "NoveltyIndex", "NoveltyResult", "fingerprint", "is_novel"]


@dataclass(frozen=True)
class Fingerprint:
    """Canonical digest and shingle sets of one program (structure is empty when it does not parse)."""

    digest: str
    structure: frozenset[int]
    text: frozenset[int]
    knobs: tuple[tuple[str, float], ...] = ()  # difficulty constants, sorted by name


@dataclass(frozen=True)
class NoveltyResult:
    """Verdict of a novelty check; `nearest` is the key of the most similar archived program."""

    novel: bool
    reason: str
    nearest: str | None = None
    structure_sim: float = 0.0
    text_sim: float = 0.0


def _user_names(tree: ast.AST) -> set[str]:
    """Identifiers the author chose: definitions, arguments, assignment targets, stored attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.attr)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    names.discard("self")
    return names


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _tokens(root: ast.AST, user: set[str]) -> list[str]:
    """Preorder node stream of `root` with user identifiers -> 'ID' and literals -> their type."""
    out: list[str] = []
    stack: list[ast.AST] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.expr_context):
            continue
        kind = type(node).__name__
        if isinstance(node, ast.Name):
            out.append(f"Name:{'ID' if node.id in user else node.id}")
        elif isinstance(node, ast.Attribute):
            out.append(f"Attr:{'ID' if node.attr in user else node.attr}")
        elif isinstance(node, ast.Constant):
            value = node.value
            special = value is None or value is True or value is False  # not `in`: 1 == True
            out.append(f"Const:{value}" if special else f"Const:{type(value).__name__}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            special = node.name if node.name.startswith("__") or node.name in _CONTRACT_METHODS else "ID"
            out.append(f"{kind}:{special}")
        elif isinstance(node, ast.ClassDef):
            out.append(kind)
            stack.extend(reversed(node.bases))  # the body is split into units by _units
            continue
        else:
            out.append(kind)
        children = list(ast.iter_child_nodes(node))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            children = [c for c in children if c is not body[0]]
        stack.extend(reversed(children))
    return out


def _units(tree: ast.Module) -> list[list[str]]:
    """Token streams of the program's units: each top-level statement, class header and method.

    Splitting at definitions makes the fingerprint blind to the order of functions and methods.
    """
    user = _user_names(tree)
    units: list[list[str]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        stmt = pending.pop()
        if _is_docstring(stmt):
            continue
        if isinstance(stmt, ast.ClassDef):
            units.append(_tokens(stmt, user))
            pending.extend(stmt.body)
        else:
            units.append(_tokens(stmt, user))
    return units


_CONTRACT_METHODS = frozenset(
    {"reset", "step", "setup", "play", "handle", "check_answer", "hint", "reference_action", "random_action"}
)
_TEXT_TOKEN_RE = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|[^\sA-Za-z_\d]")


def _text_tokens(source: str) -> list[str]:
    """Lower-cased code tokens with comments removed (falls back to raw text when tokenize fails)."""
    try:
        parts = [
            tok.string
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        ]
        text = " ".join(parts)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = source
    return _TEXT_TOKEN_RE.findall(text.lower())


def _knobs(tree: ast.Module) -> tuple[tuple[str, float], ...]:
    """Numeric `UPPER_CASE = <number>` assignments at module level and in class bodies (the last wins)."""
    out: dict[str, float] = {}
    for body in [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]:
        for stmt in body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            name = stmt.targets[0].id
            if not name.isupper() or not isinstance(stmt.value, ast.Constant | ast.UnaryOp):
                continue
            try:
                value = ast.literal_eval(stmt.value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                continue
            if type(value) in (int, float):
                out[name] = value
    return tuple(sorted(out.items()))


def _shingles(tokens: list[str], k: int) -> frozenset[int]:
    if not tokens:
        return frozenset()
    k = min(k, len(tokens))
    return frozenset(zlib.crc32("\x1f".join(tokens[i : i + k]).encode()) for i in range(len(tokens) - k + 1))


def fingerprint(source: str, config: NoveltyConfig = NoveltyConfig()) -> Fingerprint:
    """Canonical-structure digest and shingle sets of `source`."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is not None:
        units = _units(tree)
        unit_digests = sorted(hashlib.sha256(" ".join(u).encode()).hexdigest() for u in units)
        digest = hashlib.sha256("\n".join(unit_digests).encode()).hexdigest()
        structure = frozenset().union(*(_shingles(u, config.structure_k) for u in units))
        knobs = _knobs(tree)
    else:
        digest = "text:" + hashlib.sha256(" ".join(_text_tokens(source)).encode()).hexdigest()
        structure, knobs = frozenset(), ()
    text = _shingles(_text_tokens(source), config.text_k)
    return Fingerprint(digest=digest, structure=structure, text=text, knobs=knobs)


def _jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class NoveltyIndex:
    """Fingerprints of archived programs by key; `check(source)` compares a candidate to all of them."""

    def __init__(self, config: NoveltyConfig = NoveltyConfig()):
        self.config = config
        self._prints: dict[str, Fingerprint] = {}

    def add(self, key: str, source: str) -> None:
        """Archives `source` under `key` (replacing an older entry with the same key)."""
        self._prints[str(key)] = fingerprint(source, self.config)

    def remove(self, key: str) -> None:
        """Forgets the program stored under `key` (no error when absent)."""
        self._prints.pop(str(key), None)

    def __len__(self) -> int:
        return len(self._prints)

    def __contains__(self, key: object) -> bool:
        return key in self._prints

    def check(self, source: str, exclude: Collection[str] = ()) -> NoveltyResult:
        """Novel unless the candidate is identical after canonicalisation or near-duplicates an entry
        (entries whose key is in `exclude` are skipped, e.g. the candidate's own archived copy); a duplicate
        may pass as a parameter variant (`NoveltyConfig.max_param_variants`)."""
        cand = fingerprint(source, self.config)
        best: tuple[float, str | None, float, float] = (-1.0, None, 0.0, 0.0)
        dups: list[tuple[str, Fingerprint, NoveltyResult]] = []
        for key, fp in list(self._prints.items()):  # a snapshot: other threads may add entries meanwhile
            if key in exclude:
                continue
            s, t = _jaccard(cand.structure, fp.structure), _jaccard(cand.text, fp.text)
            if fp.digest == cand.digest:
                reason = f"duplicate of archived env '{key}' (identical after renaming names and literals)"
                dups.append((key, fp, NoveltyResult(False, reason, key, 1.0, t)))
                continue
            score = max(s / self.config.max_structure_sim, t / self.config.max_text_sim)
            if score >= 1.0:
                reason = f"near-duplicate of archived env '{key}' (structure similarity {s:.2f}, text {t:.2f})"
                dups.append((key, fp, NoveltyResult(False, reason, key, s, t)))
            if score > best[0]:
                best = (score, key, s, t)
        if dups:
            return self._variant(cand, dups)
        score, key, s, t = best
        if key is None:
            return NoveltyResult(True, "novel (empty archive)")
        return NoveltyResult(True, f"novel (closest: '{key}', structure {s:.2f}, text {t:.2f})", key, s, t)

    def _variant(self, cand: Fingerprint, dups: list[tuple[str, Fingerprint, NoveltyResult]]) -> NoveltyResult:
        """A duplicate's verdict: a parameter variant when its constants are new to its family (and the family
        has room), else the closest duplicate's rejection."""
        first = max(dups, key=lambda d: d[2].structure_sim)[2]
        limit = self.config.max_param_variants
        if limit <= 0 or not cand.knobs:
            return first
        same = next((k for k, fp, _ in dups if fp.knobs == cand.knobs), None)
        if same is not None:
            return dataclasses.replace(first, reason=f"{first.reason}; its constants equal those of '{same}'")
        if len(dups) > limit:
            return dataclasses.replace(
                first, reason=f"{first.reason}; its family already holds {len(dups)} parameter variants (max {limit})"
            )
        parent = dict(self._prints[first.nearest].knobs) if first.nearest in self._prints else {}
        changed = ", ".join(f"{k} {parent.get(k)}->{v}" for k, v in cand.knobs if parent.get(k) != v)
        return dataclasses.replace(first, novel=True, reason=f"parameter variant of '{first.nearest}' ({changed})")


def is_novel(
    source: str,
    archive_sources: Mapping[str, str] | Iterable[str],
    config: NoveltyConfig = NoveltyConfig(),
) -> tuple[bool, str]:
    """(novel, one-line reason) for `source` against archived sources (a mapping key->source or a list)."""
    index = NoveltyIndex(config)
    items = archive_sources.items() if isinstance(archive_sources, Mapping) else enumerate(archive_sources)
    for key, src in items:
        index.add(str(key) if isinstance(archive_sources, Mapping) else f"#{key}", src)
    result = index.check(source)
    return result.novel, result.reason
