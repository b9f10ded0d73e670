"""The package's import graph, read from the code: which folder of `spade_jax` imports which.

    python scripts/import_graph.py            # folder -> folders it imports, and any circle
    python scripts/import_graph.py --modules  # module -> modules it imports
    python scripts/import_graph.py --dot      # Graphviz, for `dot -Tpng`

Every import counts, at module level or inside a function (a dependency either way), relative imports are
resolved, and `from pkg import name` counts as importing the module `pkg.name` when there is one. Imports
under `if TYPE_CHECKING:` count too: a circle a reader has to untangle is a circle. `tests/test_layering.py`
uses the same functions to check the folder rules and that the graph has no circles.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "spade_jax"
# Environment programs (the seed library, the pools' games) are data the sandbox loads, not modules of ours.
DATA_FOLDERS = ("envs/seeds/", "envs/pool_envs/")


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def modules() -> dict[str, Path]:
    """Every module of the package (data folders left out), by dotted name."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not any(rel.startswith(d) for d in DATA_FOLDERS):
            out[module_name(path)] = path
    return out


def imports(path: Path, known: Iterable[str] = ()) -> set[str]:
    """Every module a file imports: absolute names, relative ones resolved, `from pkg import mod` as `pkg.mod`
    when `pkg.mod` is in `known`."""
    known = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return out


def module_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (itself and parent packages' `__init__` left out)."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        deps = {d for d in imports(path, mods) if d in mods and d != name}
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    return graph


def folder(module: str) -> str:
    """The folder a module belongs to: `spade_jax.sandbox.inside.worker` -> `sandbox/inside`, a root module
    (`spade_jax.streams`) -> its own name."""
    parts = module.split(".")[1:]
    path = PACKAGE.joinpath(*parts)
    if path.is_dir():  # a package's __init__
        return "/".join(parts) or "spade_jax"
    return "/".join(parts[:-1]) or parts[-1]


def folder_graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, deps in module_graph().items():
        src = folder(mod)
        out.setdefault(src, set()).update(folder(d) for d in deps if folder(d) != src)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modules", action="store_true", help="module level instead of folder level")
    p.add_argument("--dot", action="store_true", help="Graphviz output")
    args = p.parse_args(argv)
    graph = module_graph() if args.modules else folder_graph()
    if args.dot:
        print("digraph spade_jax {\n  rankdir=BT;")
        for src, deps in sorted(graph.items()):
            for d in sorted(deps):
                print(f'  "{src}" -> "{d}";')
        print("}")
        return 0
    width = max(map(len, graph))
    for src, deps in sorted(graph.items()):
        print(f"{src:<{width}} -> {', '.join(sorted(deps)) or '(nothing of ours)'}")
    loops = circles(graph)
    print("circles: " + ("; ".join(" <-> ".join(c) for c in loops) if loops else "none"))
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main())
