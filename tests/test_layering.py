"""The package's layering rules (README, "Layout"), read from the code itself:
- `spade_jax.envs` (what runs next to and inside the sandboxes) imports no JAX, Flax, Optax, nor the model,
  sampler, learner or self-play packages;
- `spade_jax.model` imports nothing of ours, `spade_jax.sampling` only the model;
- `spade_jax.rl` imports neither `spade_jax.selfplay` nor `spade_jax.envs`;
- `run/loop.py` stays short enough to read in one sitting (< 200 lines);
- config modules import nothing heavy: loading and checking a run config does not import jax (a subprocess,
  so that what this test process already imported does not count).
Module-level and function-level imports both count (an import inside a function is still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spade_jax"
HEAVY = ("jax", "jaxlib", "flax", "optax", "orbax", "grain", "tensorstore", "transformers", "torch")
CONFIG_MODULES = ("spade_jax.config.run", "spade_jax.config.selfplay", "spade_jax.config.learner",
                  "spade_jax.config.warmstart", "spade_jax.config.overrides")  # fmt: skip


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
    return out


def _violations(subpackage: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((PACKAGE / subpackage).rglob("*.py")):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    return bad


def test_envs_imports_no_jax_and_no_higher_layer():
    forbidden = (*HEAVY, "spade_jax.model", "spade_jax.sampling", "spade_jax.rl", "spade_jax.selfplay",
                 "spade_jax.run.loop", "spade_jax.rundir.checkpoints")  # fmt: skip
    assert _violations("envs", forbidden) == []


def test_model_imports_nothing_of_ours_and_sampling_only_the_model():
    ours = ("spade_jax.envs", "spade_jax.rl", "spade_jax.selfplay", "spade_jax.run.loop", "spade_jax.eval")
    assert _violations("model", (*ours, "spade_jax.sampling")) == []
    assert _violations("sampling", ours) == []


def test_rl_imports_no_selfplay_and_no_envs():
    assert _violations("rl", ("spade_jax.selfplay", "spade_jax.envs")) == []


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


def test_the_rule_checker_sees_a_violation(tmp_path):
    """The checker itself can fail: a function-level and a relative import are both found."""
    fake = PACKAGE / "rl" / "batch.py"
    names = _imports(fake)
    assert "numpy" in names and "jax" in names
    assert any(n.startswith("spade_jax.rl") for n in _imports(PACKAGE / "rl" / "learner.py"))


def test_loop_reads_in_one_sitting():
    lines = (PACKAGE / "run/loop.py").read_text(encoding="utf-8").count("\n")
    assert lines < 200, f"run/loop.py has {lines} lines"


@pytest.mark.parametrize("module", CONFIG_MODULES)
def test_config_modules_load_without_jax(module):
    code = f"import sys, {module}\nheavy = [m for m in {HEAVY!r} if m in sys.modules]\nprint(','.join(heavy))\n"
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
