"""`envs.formats`: telling the two contracts apart, completing the paper's implicit imports, reading metadata."""

from __future__ import annotations

import ast

import pytest

from spade_jax.envs.formats import ADDED_MARK, complete_imports, env_meta, missing_imports, source_contract
from spade_jax.envs.seeds import load_seed_source
from spade_jax.gates.static import check_static

PLAIN = '''"""A docstring first."""
from __future__ import annotations


class CountEnv:
    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.seen = deque(maxlen=3)
        return "Count.", {}

    def step(self, action):
        return "ok", float(math.isclose(1.0, 1.0)), True, False, {}
'''


def test_missing_imports_go_after_the_docstring_and_future_imports():
    out = complete_imports(PLAIN)
    tree = ast.parse(out)
    assert isinstance(tree.body[0], ast.Expr) and tree.body[1].module == "__future__"  # still first, in order
    added = [ast.unparse(n) for n in tree.body[2:5]]
    assert added == ["from collections import deque", "import math", "import random"]
    assert ADDED_MARK in out and complete_imports(out) == out  # idempotent
    compile(out, "<env>", "exec")
    assert check_static(out).ok


def test_names_the_program_binds_itself_are_not_imported():
    source = "def f(deque):\n    math = 2\n    return deque, math\n\nclass E:\n    def reset(self, seed=None):\n"
    source += "        return 'x', {}\n    def step(self, a):\n        return 'x', 0.0, True, False, {}\n"
    assert missing_imports(source) == []
    assert complete_imports(source) == source
    assert complete_imports("def broken(:\n") == "def broken(:\n"  # does not parse: unchanged, the gate says why


def test_numpy_is_refused_with_one_line_naming_it():
    source = "class E:\n    def reset(self, seed=None):\n        return str(np.zeros(2)), {}\n"
    source += "    def step(self, a):\n        return 'x', 0.0, True, False, {}\n"
    report = check_static(complete_imports(source))
    assert not report.ok and "numpy" in report.reason and "standard library" in report.reason


def test_contract_and_metadata_of_either_format():
    seed = load_seed_source("nim_duel")
    assert source_contract(seed) == "ours" and source_contract(PLAIN) == "gym"
    ours = env_meta(seed, "nim_duel.py")
    assert (ours.contract, ours.kind, ours.skill, ours.name) == ("ours", "game", "strategic planning", "nim_duel")
    gym = env_meta(PLAIN, "count.py")
    assert (gym.contract, gym.kind, gym.name, gym.class_name) == ("gym", "game", "count", "CountEnv")
    tool = PLAIN.replace('return "Count.", {}', 'return "Use <tool_call>{...}</tool_call>.", {}')
    assert env_meta(tool, "t.py", default_name="desk").kind == "tool"
    assert env_meta(tool, "t.py", default_name="desk").name == "desk"
    with pytest.raises(ValueError, match="nothing.py: no environment class"):
        env_meta("x = 1\n", "nothing.py")
