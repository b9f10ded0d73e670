"""The package's layering rules (README, "Layout"), read from the code itself with `scripts/import_graph.py`:
- each folder imports only the folders of ours that `RULES` names (module-level and function-level imports
  both count: an import inside a function is still a dependency);
- no module imports, directly or around a circle, a module that imports it back;
- what runs inside the sandbox (`sandbox/inside/`) imports the standard library and itself only, checked from
  the AST and by importing it, with the environment contract, in a bare interpreter (`python -I -S`);
- the folders that run beside the sandboxes or before jax starts (`envs`, `sandbox`, `gates`, `config`) import
  no JAX, Flax, Optax, Orbax, grain or torch, and loading a run config imports none of them (a subprocess, so
  that what this test process already imported does not count);
- `rl` knows no role names; `run/loop.py` stays readable in one sitting.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.import_graph import PACKAGE, circles, folder, folder_graph, imports, module_graph, modules

HEAVY = ("jax", "jaxlib", "flax", "optax", "orbax", "grain", "tensorstore", "transformers", "torch")
ROOTS = {"trajectory", "streams", "interfaces"}  # the shared vocabulary: the only modules at the root
# folder -> the folders of ours it may import. Read bottom-up: a folder may import only what sits below it.
RULES: dict[str, set[str]] = {
    "spade_jax": set(),
    "trajectory": set(),
    "streams": set(),
    "interfaces": set(),
    "model": set(),
    "sampling": {"model"},
    "rl": {"model", "sampling", "config", "trajectory"},
    "envs": set(),
    "sandbox/inside": set(),
    "sandbox": {"sandbox/inside", "config", "envs", "infra"},
    "config": {"envs", "streams"},
    "gates": {"config", "envs", "sandbox", "interfaces"},
    "infra": {"streams"},
    "rundir": set(),
    "report": {"rundir"},
    "selfplay": {"config", "envs", "gates", "sampling", "interfaces", "streams", "trajectory", "infra"},
    "export": {"config", "envs", "model", "rundir", "selfplay"},
    "eval": {"config", "envs", "gates", "interfaces", "model", "sampling", "sandbox", "selfplay", "streams"},
    "run": {
        "config",
        "envs",
        "eval",
        "gates",
        "infra",
        "interfaces",
        "model",
        "report",
        "rl",
        "rundir",
        "sampling",
        "sandbox",
        "selfplay",
        "streams",
        "trajectory",
    },  # fmt: skip
    "cli": {
        "config",
        "envs",
        "eval",
        "export",
        "gates",
        "infra",
        "model",
        "run",
        "rundir",
        "sampling",
        "sandbox",
        "selfplay",
        "streams",
    },  # fmt: skip
}
NO_HEAVY = ("envs", "sandbox", "gates", "config")
CONFIG_MODULES = ("spade_jax.config.run", "spade_jax.config.selfplay", "spade_jax.config.learner",
                  "spade_jax.config.warmstart", "spade_jax.config.overrides", "spade_jax.config.gates",
                  "spade_jax.config.sandbox")  # fmt: skip
INSIDE = PACKAGE / "sandbox" / "inside"


def test_every_folder_has_a_rule_and_the_root_holds_only_the_vocabulary():
    graph = folder_graph()
    assert set(graph) <= set(RULES), f"folders without a rule: {sorted(set(graph) - set(RULES))}"
    root_modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert root_modules == ROOTS


@pytest.mark.parametrize("src", sorted(RULES))
def test_folder_imports_only_what_its_rule_allows(src):
    bad = []
    for mod, deps in module_graph().items():
        if folder(mod) != src:
            continue
        bad += [f"{mod} imports {d}" for d in sorted(deps) if folder(d) != src and folder(d) not in RULES[src]]
    assert bad == []


def test_no_import_circles():
    assert circles(module_graph()) == []
    assert circles(folder_graph()) == []


def test_the_rule_checker_sees_a_violation_and_a_circle():
    """The checker itself can fail: a function-level and a relative import are both found, and a circle is."""
    names = imports(PACKAGE / "rl" / "batch.py")
    assert "numpy" in names and "jax" in names
    assert any(n.startswith("spade_jax.rl") for n in imports(PACKAGE / "rl" / "learner.py"))
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert folder("spade_jax.sandbox.inside.worker") == "sandbox/inside" and folder("spade_jax.streams") == "streams"


@pytest.mark.parametrize("src", NO_HEAVY)
def test_no_jax_beside_the_sandboxes_or_in_configs(src):
    bad = []
    for mod, path in modules().items():
        if folder(mod).split("/")[0] != src:
            continue
        bad += [f"{mod} imports {n}" for n in sorted(imports(path)) if n.split(".")[0] in HEAVY]
    assert bad == []


def test_inside_the_sandbox_only_the_standard_library_from_the_ast():
    allowed_ours = {m for m in modules() if m.startswith("spade_jax.sandbox.inside")} | {
        "spade_jax",
        "spade_jax.sandbox",
    }
    bad = []
    for path in sorted(INSIDE.rglob("*.py")):
        for name in imports(path):
            top = name.split(".")[0]
            if top == "spade_jax":
                if name not in allowed_ours:
                    bad.append(f"{path.name} imports {name}")
            elif top not in sys.stdlib_module_names and top != "__future__":
                bad.append(f"{path.name} imports {name}")
    assert bad == []


def test_inside_the_sandbox_only_the_standard_library_in_a_bare_interpreter():
    """The worker's modules and the environment contract they load for environment code, imported by an
    interpreter with no site-packages (`-I -S`, as bare as the sandbox's): nothing outside the standard library
    may be needed, and nothing of ours beyond `sandbox/inside` and `envs/` gets loaded."""
    code = (
        "import sys\n"
        f"sys.path[0:0] = [{str(PACKAGE.parent)!r}]\n"
        "base = set(sys.modules)\n"
        "from spade_jax.sandbox.inside import cleanup, episode, procs, worker\n"
        "import spade_jax.envs.base\n"
        "for name in worker.PRELOAD: __import__(name)\n"
        "new = sorted(m for m in set(sys.modules) - base if m.split('.')[0] not in sys.stdlib_module_names)\n"
        "print('\\n'.join(new))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(out.stdout.split())
    stray = {m for m in loaded if not (m.startswith(("spade_jax.sandbox.inside", "spade_jax.envs")) or
                                       m in ("spade_jax", "spade_jax.sandbox"))}  # fmt: skip
    assert stray == set() and "spade_jax.envs.base" in loaded


def test_the_sandbox_boots_the_worker_through_an_import():
    """The launch command names the worker by the module object the launchers import, so a rename fails when
    the launchers are imported, not when a sandbox starts."""
    from spade_jax.sandbox import launchers
    from spade_jax.sandbox.inside import worker

    assert launchers.inside_worker is worker
    assert f"from {worker.__name__} import main" in launchers._BOOT


def test_rl_knows_no_role_names():
    """rl takes the trajectory record from `spade_jax.trajectory`, not the roles: the learner is told their
    names (`Learner(role_names=...)`), so a third role needs no change in rl."""
    taken = set()
    for path in sorted((PACKAGE / "rl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "spade_jax.trajectory":
                taken.update(a.name for a in node.names)
    assert taken == {"Sample"}
    assert "agent" not in (PACKAGE / "rl" / "learner.py").read_text(encoding="utf-8").lower().replace("_", " ")


def test_loop_reads_in_one_sitting():
    lines = (PACKAGE / "run" / "loop.py").read_text(encoding="utf-8").count("\n")
    assert lines < 300, f"run/loop.py has {lines} lines"


@pytest.mark.parametrize("module", CONFIG_MODULES)
def test_config_modules_load_without_jax_the_sandbox_or_the_gates(module):
    code = (
        f"import sys, {module}\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "ours = [m for m in sys.modules if m.startswith(('spade_jax.sandbox', 'spade_jax.gates'))]\n"
        "print(','.join(heavy + ours))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"importing {module} imported {out.stdout.strip()}"


def test_a_run_config_builds_and_checks_without_jax():
    """A preset with overrides is built and validated (the CLI's first step) before jax is imported."""
    code = (
        "import sys\n"
        "from spade_jax.config.run import load_run_config\n"
        "cfg = load_run_config('demo', ['loop.steps=2', 'selfplay.plays_per_condition=2'])\n"
        "assert cfg.loop.steps == 2\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""


def test_the_graph_script_prints_the_graph():
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "scripts/import_graph.py"], cwd=root, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sampling       -> model" in out.stdout and out.stdout.strip().endswith("circles: none")
