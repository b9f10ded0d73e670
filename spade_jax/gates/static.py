"""Static gate: judges environment source without running it (syntax, one env class, imports, banned names).

A cheap filter that gives the designer a one-line reason, and defence in depth in front of the sandbox. It is
ADVISORY: a syntactic check over Python cannot see every way to reach a capability (a name computed at run time,
an object handed around), so what it lets through is enforced at run time inside the sandbox, whatever the
route: the episode's audit hook and seccomp filter (`sandbox/inside/guard.py`) refuse process creation, exec and
compile of new code, sockets, raw memory and files outside the episode's directory.

What it does guarantee, for the names that import statements bind to modules (`import random`, `import re as
r`, `from collections import abc`), and for the module chains they lead to (`re.enum`): no private or dunder
attribute of a module is read (`random._os`, `getattr(random, "_os")`), no module is reached that the allow-list
does not name (`re.enum.sys`, `re.enum.bltns`), and no module is used as a value (`r = random`, `def f(m=random)`,
`(random,)`, `f(random)`): a module appears only as the object of a literal attribute or of a getattr with a
literal name, so the checks above see every attribute taken of it. `getattr`/`setattr`/`delattr`/`hasattr` are
used only as direct calls, and a name given to them that folds to a constant (`"_" * 2 + "globals" + "_" * 2`)
is checked like a literal one. Pure standard library; `compile()` is used only to check syntax, the code is never
executed here.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from dataclasses import dataclass, field

from spade_jax.config.gates import StaticConfig

__all__ = ["StaticConfig", "StaticReport", "check_static"]

BASE_CLASSES = ("TextEnv", "GameEnv", "ToolEnv", "ReasoningEnv")
# Builtins that reach files, code execution, the interpreter or the terminal.
BANNED_BUILTINS = frozenset(
    {"open", "exec", "eval", "compile", "__import__", "input", "globals", "locals", "vars", "breakpoint",
     "exit", "quit", "help", "memoryview", "copyright", "credits", "license"}
)  # fmt: skip
ATTR_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
# Dunder names that ordinary code uses; every other dunder attribute/name is a sandbox-escape idiom.
SAFE_DUNDERS = frozenset(
    {"__init__", "__name__", "__qualname__", "__doc__", "__post_init__", "__repr__", "__str__", "__eq__",
     "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__len__", "__iter__", "__next__",
     "__contains__", "__getitem__", "__setitem__", "__delitem__", "__bool__", "__add__", "__sub__",
     "__mul__", "__main__", "__slots__", "__all__", "__future__", "__annotations__"}
)  # fmt: skip
# Introspection attributes that lead from an object to frames, code or globals.
BANNED_ATTRS = frozenset(
    {"gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_globals",
     "f_builtins", "f_locals", "f_back", "f_code", "f_trace", "tb_frame", "tb_next", "co_code", "co_consts",
     "func_globals", "func_code", "mro"}
)  # fmt: skip
# Callables in allowed modules that evaluate strings as code.
BANNED_MODULE_ATTRS = frozenset({"typing.get_type_hints", "typing.ForwardRef", "string.Formatter"})
_DUNDER_RE = re.compile(r"__[A-Za-z]\w*?__")
_FORMAT_ATTR_RE = re.compile(r"\{[^{}]*\.\s*_")


@dataclass(frozen=True)
class StaticReport:
    """Outcome of the static gate; `reason` is one line, `line` the offending source line when known."""

    ok: bool
    reason: str
    class_name: str | None = None
    base: str | None = None
    line: int | None = None
    details: dict = field(default_factory=dict)


class _Fail(Exception):
    def __init__(self, reason: str, line: int | None = None):
        super().__init__(reason)
        self.reason, self.line = reason, line


def _module_attr(module: str, attr: str) -> object | None:
    """The real attribute `module.attr` of an allowed stdlib module (imported here, never executed code)."""
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None


class _Scanner(ast.NodeVisitor):
    """Collects banned constructs; raises _Fail on the first one (in source order)."""

    def __init__(self, config: StaticConfig):
        self.config = config
        self.allowed = set(config.allowed_imports)
        self.own = set(config.allowed_own_modules)
        self.module_aliases: dict[str, str] = {}  # local name -> stdlib module it is bound to
        self.base_aliases: dict[str, str] = {}  # local name -> base class name in spade_jax.envs.base
        self.base_module_aliases: set[str] = set()  # local names bound to spade_jax.envs.base itself
        self.in_main_guard = False
        self.as_object: set[int] = set()  # ids of module expressions used as the object of an attribute
        self.constants: dict[str, str] = {}  # module-level names bound once to a str constant (for folding)

    # imports -------------------------------------------------------------------------------------
    def _check_module(self, name: str, node: ast.AST) -> None:
        if name in self.own:
            return
        top = name.split(".")[0]
        if top == "numpy":
            raise _Fail("uses numpy, which the sandbox does not have (environments run on the standard library "
                        "only)", node.lineno)  # fmt: skip
        if top not in self.allowed or any(p.startswith("_") for p in name.split(".")[1:]):
            raise _Fail(f"imports '{name}', which is not allowed (allowed: {', '.join(sorted(self.allowed))})",
                        node.lineno)  # fmt: skip

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, node)
            if alias.name in self.own:
                if alias.asname:
                    self.base_module_aliases.add(alias.asname)
                continue
            self.module_aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            raise _Fail("uses a relative import, which is not allowed", node.lineno)
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if full in self.own:  # from spade_jax.envs import base
                self.base_module_aliases.add(alias.asname or alias.name)
                continue
            self._check_module(module, node)
            if module in self.own:
                if alias.name in BASE_CLASSES:
                    self.base_aliases[alias.asname or alias.name] = alias.name
                continue
            if alias.name.startswith("_"):
                raise _Fail(f"imports private name '{alias.name}' from {module}", node.lineno)
            self._check_module_attr(module, alias.name, node)
            if isinstance(_module_attr(module, alias.name), types.ModuleType):
                self.module_aliases[alias.asname or alias.name] = f"{module}.{alias.name}"

    def _check_module_attr(self, module: str, attr: str, node: ast.AST) -> None:
        if f"{module}.{attr}" in BANNED_MODULE_ATTRS:
            raise _Fail(f"uses {module}.{attr}, which evaluates strings as code", node.lineno)
        value = _module_attr(module, attr)
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in self.allowed:
            raise _Fail(f"reaches module '{value.__name__}' through {module}.{attr}, which is not allowed",
                        node.lineno)  # fmt: skip

    # names and attributes --------------------------------------------------------------------------
    def module_of(self, expr: ast.AST) -> str | None:
        """The module an expression is, when it is an import-bound name or a chain of module attributes."""
        if isinstance(expr, ast.Name):
            return self.module_aliases.get(expr.id)
        if isinstance(expr, ast.Attribute):
            outer = self.module_of(expr.value)
            value = _module_attr(outer, expr.attr) if outer else None
            if isinstance(value, types.ModuleType):
                return value.__name__
        return None

    def fold(self, expr: ast.AST) -> str | None:
        """The str value of a constant expression (str literals, module-level str constants, + and *), or None."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Name):
            return self.constants.get(expr.id)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.fold(expr.left), self.fold(expr.right)
            return left + right if left is not None and right is not None else None
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
            text, times = (expr.left, expr.right) if not isinstance(expr.left, ast.Constant) or isinstance(
                expr.left.value, str) else (expr.right, expr.left)  # fmt: skip
            s = self.fold(text)
            n = times.value if isinstance(times, ast.Constant) and isinstance(times.value, int) else None
            return s * n if s is not None and n is not None and 0 <= n <= 16 and len(s) <= 64 else None
        return None

    def visit_Module(self, node: ast.Module) -> None:
        counts: dict[str, int] = {}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                counts[sub.id] = counts.get(sub.id, 0) + 1
        for stmt in node.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
                    and counts.get(stmt.targets[0].id) == 1):  # fmt: skip
                self.constants[stmt.targets[0].id] = stmt.value.value
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in self.module_aliases and isinstance(node.ctx, ast.Load) and id(node) not in self.as_object:
            raise _Fail(f"uses module {name} as a value (only '{name}.attribute' is allowed)", node.lineno)
        if name in ATTR_BUILTINS and id(node) not in self.as_object:
            raise _Fail(f"uses {name} as a value (only a direct call {name}(...) is allowed)", node.lineno)
        if name in BANNED_BUILTINS:
            raise _Fail(f"uses '{name}', which is not allowed", node.lineno)
        if name == "print" and self.config.ban_print and not self.in_main_guard:
            raise _Fail("uses print(); return observations instead of printing them", node.lineno)
        if _DUNDER_RE.fullmatch(name) and name not in SAFE_DUNDERS:
            raise _Fail(f"uses the dunder name '{name}', which is not allowed", node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if _DUNDER_RE.fullmatch(attr) and attr not in SAFE_DUNDERS:
            raise _Fail(f"accesses dunder attribute '.{attr}', which is not allowed", node.lineno)
        if attr in BANNED_ATTRS:
            raise _Fail(f"accesses introspection attribute '.{attr}', which is not allowed", node.lineno)
        module = self.module_of(node.value)
        if module is not None:
            self.as_object.add(id(node.value))
            shown = ast.unparse(node.value)
            if attr.startswith("_"):
                raise _Fail(f"accesses private attribute {shown}.{attr}", node.lineno)
            self._check_module_attr(module, attr, node)
            if isinstance(node.ctx, ast.Load) and isinstance(_module_attr(module, attr), types.ModuleType):
                if id(node) not in self.as_object:  # a module chain must go on to an attribute: no module value
                    raise _Fail(f"uses module {shown}.{attr} as a value", node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ATTR_BUILTINS:
            self.as_object.add(id(func))  # called directly: its arguments are judged below
        if isinstance(func, ast.Name) and func.id in ATTR_BUILTINS and len(node.args) >= 2:
            obj, name = node.args[0], node.args[1]
            value = self.fold(name)  # a literal, or a constant expression ("_" * 2 + "globals" + "_" * 2)
            if value is not None and value.startswith("__") and value not in SAFE_DUNDERS:
                raise _Fail(f"calls {func.id}() with dunder name '{value}'", node.lineno)
            module = self.module_of(obj)
            if module is not None:  # what `module.attr` would check
                self.as_object.add(id(obj))
                if value is None:
                    raise _Fail(f"calls {func.id}() on module {ast.unparse(obj)} with a computed name", node.lineno)
                if value.startswith("_"):
                    raise _Fail(f"accesses private attribute {ast.unparse(obj)}.{value}", node.lineno)
                self._check_module_attr(module, value, node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str | bytes):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            for m in _DUNDER_RE.finditer(text):
                if m.group(0) not in SAFE_DUNDERS:
                    raise _Fail(f"string mentions dunder name '{m.group(0)}', which is not allowed", node.lineno)
            if isinstance(node.value, str) and _FORMAT_ATTR_RE.search(text):
                raise _Fail("format string reaches into private attributes ('{x._...}')", node.lineno)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        is_main = (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
        )
        if not is_main:
            self.generic_visit(node)
            return
        self.visit(test)
        old, self.in_main_guard = self.in_main_guard, True
        for stmt in node.body + node.orelse:
            self.visit(stmt)
        self.in_main_guard = old


def _depth(tree: ast.AST) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _accepts(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    a = fn.args
    return a.kwarg is not None or any(p.arg == name for p in a.posonlyargs[1:] + a.args[1:] + a.kwonlyargs)


def _positional_slots(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(required, maximum) positional arguments after self; maximum is large with *args."""
    pos = fn.args.posonlyargs + fn.args.args
    required = len(pos) - len(fn.args.defaults) - 1
    return max(required, 0), (10**6 if fn.args.vararg else len(pos) - 1)


class _EnvInfo:
    """An environment class with the methods it defines itself or inherits from local classes."""

    def __init__(self, node: ast.ClassDef, base: str | None, methods: dict):
        self.node, self.base, self.methods = node, base, methods


def _resolve_classes(tree: ast.Module, scanner: _Scanner) -> list[_EnvInfo]:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    memo: dict[str, tuple[str | None, dict]] = {}

    def resolve(name: str, seen: frozenset[str]) -> tuple[str | None, dict]:
        if name in memo:
            return memo[name]
        node = classes[name]
        base, methods = None, {}
        for b in node.bases:
            bname = None
            if isinstance(b, ast.Name):
                if b.id in scanner.base_aliases:
                    base = base or scanner.base_aliases[b.id]
                elif b.id in classes and b.id not in seen:
                    bname = b.id
            elif isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name):
                if b.value.id in scanner.base_module_aliases and b.attr in BASE_CLASSES:
                    base = base or b.attr
            if bname:
                sub_base, sub_methods = resolve(bname, seen | {name})
                base = base or sub_base
                methods = {**sub_methods, **methods} if methods else dict(sub_methods)
        methods = {**methods, **_methods(node)}
        memo[name] = (base, methods)
        return memo[name]

    envs = []
    for name, node in classes.items():
        base, methods = resolve(name, frozenset())
        if base or {"reset", "step"} <= methods.keys():
            envs.append(_EnvInfo(node, base, methods))
    parents = {b.id for e in envs for b in e.node.bases if isinstance(b, ast.Name)}
    return [e for e in envs if e.node.name not in parents]


def _declares_tools(env: _EnvInfo) -> bool:
    for fn in env.methods.values():
        for d in fn.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            if (
                isinstance(target, ast.Name | ast.Attribute)
                and getattr(target, "id", getattr(target, "attr", "")) == "tool"
            ):
                return True
    return any(
        isinstance(n, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "TOOLS"
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
        for n in env.node.body
    )


_REQUIRED = {
    "TextEnv": (("setup",), ("handle", "step")),
    "GameEnv": (("setup",), ("play", "handle", "step")),
    "ToolEnv": (("setup",), ("check_answer", "handle", "step")),
    "ReasoningEnv": (("setup",), ("check_answer", "handle", "step")),
}


def _check_env_class(env: _EnvInfo) -> None:
    name, m = env.node.name, env.methods
    if env.base is None:
        for meth in ("reset", "step"):
            if meth not in m:
                raise _Fail(f"class {name} has no {meth}() method", env.node.lineno)
    else:
        overrides_both = {"reset", "step"} <= m.keys()
        for group in _REQUIRED[env.base]:
            if not overrides_both and not any(g in m for g in group):
                raise _Fail(f"class {name}({env.base}) does not define {group[0]}()", env.node.lineno)
    init = m.get("__init__")
    if init is not None:
        if env.base is not None and not _accepts(init, "max_turns"):  # a plain class may keep its own turn cap
            raise _Fail(f"{name}.__init__ does not accept max_turns", init.lineno)
        required, _ = _positional_slots(init)
        kw_required = [a.arg for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults) if d is None]
        pos_names = [a.arg for a in (init.args.posonlyargs + init.args.args)[1 : 1 + required]]
        extra = [n for n in pos_names + kw_required if n != "max_turns"]
        if extra:
            raise _Fail(f"{name}.__init__ requires argument(s) {', '.join(extra)} besides max_turns", init.lineno)
    if "reset" in m and not (_accepts(m["reset"], "seed") or m["reset"].args.vararg):
        raise _Fail(f"{name}.reset() does not accept seed", m["reset"].lineno)
    if "step" in m:
        required, maximum = _positional_slots(m["step"])
        if required > 1 or maximum < 1:
            raise _Fail(f"{name}.step() must take exactly one action argument", m["step"].lineno)
    if env.base == "ToolEnv" and not _declares_tools(env):
        raise _Fail(f"class {name}(ToolEnv) declares no tools (no @tool methods and no TOOLS list)", env.node.lineno)
    hooks = (("setup", 0), ("play", 1), ("check_answer", 1), ("handle", 1)) if env.base else ()
    for hook, arity in (*hooks, ("hint", 0), ("reference_action", 0), ("random_action", 1)):
        fn = m.get(hook)
        if fn is not None:
            required, maximum = _positional_slots(fn)
            if required > arity or maximum < arity:
                raise _Fail(f"{name}.{hook}() must take {arity} argument(s) besides self", fn.lineno)


def check_static(source: str, config: StaticConfig = StaticConfig()) -> StaticReport:
    """Runs every static check; the first problem found (in source order) is the reason."""
    if not isinstance(source, str) or not source.strip():
        return StaticReport(False, "source is empty")
    if len(source) > config.max_chars:
        return StaticReport(False, f"source is {len(source)} chars, over the {config.max_chars} limit")
    n_lines = source.count("\n") + 1
    if n_lines > config.max_lines:
        return StaticReport(False, f"source has {n_lines} lines, over the {config.max_lines} limit")
    try:
        tree = ast.parse(source)
        compile(source, "<env>", "exec", dont_inherit=True)  # symbol-table errors; nothing is executed
    except SyntaxError as e:
        msg = (e.msg or "invalid syntax").splitlines()[0]
        return StaticReport(False, f"syntax error at line {e.lineno}: {msg}", line=e.lineno)
    except (ValueError, RecursionError, MemoryError) as e:
        return StaticReport(False, f"source does not parse: {type(e).__name__}: {str(e)[:120]}")
    n_nodes = sum(1 for _ in ast.walk(tree))
    if n_nodes > config.max_nodes:
        return StaticReport(False, f"program has {n_nodes} syntax nodes, over the {config.max_nodes} limit")
    depth = _depth(tree)
    if depth > config.max_depth:
        return StaticReport(False, f"program nests {depth} levels deep, over the {config.max_depth} limit")
    scanner = _Scanner(config)
    try:
        scanner.visit(tree)
        envs = _resolve_classes(tree, scanner)
        if not envs:
            partial = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
            for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
                has = {"reset", "step"} & _methods(node).keys()
                if len(has) == 1:
                    (there,) = has
                    missing = "step" if there == "reset" else "reset"
                    raise _Fail(f"class {node.name} defines {there}() but no {missing}()", node.lineno)
            raise _Fail(
                "no environment class: no class derives from a base in spade_jax.envs.base or defines both "
                f"reset() and step() (classes: {', '.join(partial) or 'none'})"
            )
        named = [e for e in envs if e.node.name.endswith("Env")]
        envs = named if len(envs) > 1 and len(named) == 1 else envs  # the paper's rule: the class named ...Env
        if len(envs) > 1:
            names = ", ".join(e.node.name for e in envs)
            raise _Fail(f"found {len(envs)} environment classes ({names}); expected exactly one")
        _check_env_class(envs[0])
    except _Fail as f:
        where = f" (line {f.line})" if f.line else ""
        return StaticReport(False, f"{f.reason}{where}", line=f.line)
    env = envs[0]
    details = {"lines": n_lines, "chars": len(source), "nodes": n_nodes, "methods": sorted(env.methods)}
    return StaticReport(True, "ok", class_name=env.node.name, base=env.base, details=details)
