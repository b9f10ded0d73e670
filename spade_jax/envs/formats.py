"""The two environment contracts, told apart, and what makes a file of either one playable here.

* `ours`: a class deriving from a base in `spade_jax.envs.base` (`GameEnv`, `ToolEnv`, `ReasoningEnv`), with
  `KIND`, `SKILL` and `NAME` class attributes (contract.md).
* `gym`: the SPADE paper's format, a plain class (its name usually ends in `Env`) with
  `reset(seed=None) -> (observation, info)` and `step(action) -> (observation, reward, terminated, truncated,
  info)`, rewards in [0, 1]; usually a `solution()` method. No base class, no metadata attributes.

Both run through the same sandbox, gates, rollouts and audits: the worker plays any class with reset() and
step(). What the paper's loader tolerates is decided here, explicitly: code that uses common standard-library
names without importing them (`math`, `deque`, `Counter`, ...) gets the import lines it lacks
(`complete_imports`), so the static gate checks them like any other import and the stored source runs in any
loader. numpy (`np`) gets `import numpy as np` too, which the static gate then refuses with one line: the
sandbox runs the standard library only, because numpy's buffer and ctypes interfaces reach raw memory, outside
what the static gate and the leak check can see, and its import would add ~0.1 s to every sandbox start.

Nothing here runs the code; sources that do not parse are returned unchanged (the static gate reports them).
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

from spade_jax.envs.contract import KINDS, SKILLS, class_attrs, str_attrs
from spade_jax.envs.text import safe_label

__all__ = [
    "FORMATS",
    "EnvMeta",
    "complete_imports",
    "env_meta",
    "missing_imports",
    "skill_from_filename",
    "source_contract",
]

FORMATS: tuple[str, ...] = ("ours", "gym")
OWN_BASE_MODULE = "spade_jax.envs.base"
# Names the paper's loader puts in every generated game's namespace, as the import that provides each.
IMPLICIT_MODULES: dict[str, str] = {
    m: f"import {m}"
    for m in ("itertools", "math", "random", "re", "json", "collections", "functools", "string", "copy",
              "heapq", "statistics")
}  # fmt: skip
IMPLICIT_MODULES.update({"np": "import numpy as np", "numpy": "import numpy"})
IMPLICIT_NAMES: dict[str, str] = {
    **dict.fromkeys(("deque", "defaultdict", "Counter", "OrderedDict", "namedtuple"), "collections"),
    **dict.fromkeys(("combinations", "permutations", "product", "chain", "accumulate"), "itertools"),
    **dict.fromkeys(("reduce", "lru_cache"), "functools"),
    "deepcopy": "copy",
    **dict.fromkeys(("heappush", "heappop"), "heapq"),
    **dict.fromkeys(("Tuple", "Dict", "List", "Optional", "Union", "Any", "Set", "FrozenSet", "Callable",
                     "Iterable", "Sequence", "Mapping"), "typing"),
}  # fmt: skip
ADDED_MARK = "# imports added by spade-jax (names the code uses without importing them)"
_TOOL_MARKERS = ("<tool_call>", "get_tools", "tool_schemas")


@dataclass(frozen=True)
class EnvMeta:
    """What a source says about itself: its contract, kind (game/tool/reasoning), skill, name and class."""

    contract: str
    kind: str
    skill: str
    name: str
    class_name: str


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _imports_own_base(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OWN_BASE_MODULE.rsplit(".", 1)[0]):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith(OWN_BASE_MODULE) for a in node.names):
            return True
    return False


def source_contract(source: str) -> str:
    """ "ours" when the source imports our base classes, else "gym" (a plain reset/step class)."""
    tree = _parse(source)
    return "ours" if tree is not None and _imports_own_base(tree) else "gym"


def _bound_and_loaded(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Every name the module binds anywhere (any scope) and every name it reads."""
    bound, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound.update(node.names)
    return bound, loaded


def missing_imports(source: str) -> list[str]:
    """The import lines a source needs for the standard-library names it reads but never binds (sorted)."""
    tree = _parse(source)
    if tree is None:
        return []
    bound, loaded = _bound_and_loaded(tree)
    free = loaded - bound - set(dir(builtins))
    lines = {IMPLICIT_MODULES[n] for n in free if n in IMPLICIT_MODULES}
    by_module: dict[str, list[str]] = {}
    for name in sorted(free & IMPLICIT_NAMES.keys()):
        by_module.setdefault(IMPLICIT_NAMES[name], []).append(name)
    lines |= {f"from {m} import {', '.join(names)}" for m, names in by_module.items()}
    return sorted(lines)


def complete_imports(source: str) -> str:
    """`source` with the import lines it lacks (see `missing_imports`), after its docstring and `__future__`
    imports; unchanged when nothing is missing or it does not parse. Idempotent."""
    lines = missing_imports(source)
    if not lines:
        return source
    tree = _parse(source)
    assert tree is not None  # missing_imports parsed it
    after = 0
    for i, node in enumerate(tree.body):
        docstring = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            after = node.end_lineno or node.lineno
        else:
            break
    text = source.splitlines(keepends=True)
    block = "\n".join([ADDED_MARK, *lines]) + "\n"
    head = "".join(text[:after])
    if head:
        head += "\n" if head.endswith("\n") else "\n\n"
    return head + block + "".join(text[after:])


def _env_class(tree: ast.Module) -> ast.ClassDef | None:
    """The environment class of a plain-format file: the first class ending in `Env` that defines reset and
    step (the paper's loader takes the first class ending in `Env`), else the first that defines both."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    playable = [c for c in classes if {"reset", "step"} <= {f.name for f in c.body if isinstance(f, ast.FunctionDef)}]
    named = [c for c in playable if c.name.endswith("Env")]
    return (named or playable or [None])[0]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def skill_from_filename(stem: str) -> str:
    """The skill in a released-layout file name (`game_{rollout}_{index}_{skill_slug}`), or ""."""
    for skill in SKILLS:
        if stem.endswith("_" + skill.replace(" ", "_")):
            return skill
    return ""


def env_meta(source: str, where: str, *, default_name: str = "") -> EnvMeta:
    """The metadata of an environment source of either contract; ValueError naming `where` when the source
    does not parse or holds no environment class. Plain classes are tool environments when they speak the
    `<tool_call>` protocol (or expose tool schemas), games otherwise; their skill is a `SKILL` attribute if any."""
    tree = _parse(source)
    if tree is None:
        class_attrs(source, where)  # raises the parse error, worded once
    default_name = safe_label(default_name)  # names and skills end up in SQLite, logs and terminals: plain text
    if _imports_own_base(tree):
        attrs = class_attrs(source, where)
        cls = next((n.name for n in tree.body if isinstance(n, ast.ClassDef)), "")
        name = safe_label(attrs.get("NAME") or "") or default_name
        return EnvMeta("ours", attrs["KIND"], safe_label(attrs.get("SKILL", "")), name, cls)
    node = _env_class(tree)
    if node is None:
        raise ValueError(f"{where}: no environment class (a class with reset() and step())")
    attrs = str_attrs(node)
    segment = ast.get_source_segment(source, node) or ""
    kind = "tool" if any(m in segment for m in _TOOL_MARKERS) else "game"
    kind = attrs["KIND"] if attrs.get("KIND") in KINDS else kind
    name = safe_label(attrs.get("NAME") or "") or default_name or _snake(node.name.removesuffix("Env") or node.name)
    return EnvMeta("gym", kind, safe_label(attrs.get("SKILL", "")), name, node.name)
