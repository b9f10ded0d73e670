"""Static gate: hostile idioms are caught, ordinary environment code is not (no execution involved)."""

from __future__ import annotations

import pytest

from spade_jax.envs.contract import contract_examples
from spade_jax.envs.seeds import list_seeds, load_seed_source
from spade_jax.gates.static import StaticConfig, check_static

HEAD = "from spade_jax.envs.base import GameEnv\n\n\nclass G(GameEnv):\n"


def game(body: str, top: str = "") -> str:
    """A minimal valid GameEnv with `body` added inside the class and `top` above it."""
    methods = (
        "    def setup(self) -> str:\n        return 'Guess, e.g. \\\\boxed{1}.'\n\n"
        "    def play(self, command: str):\n        return self.lose()\n"
    )
    return top + HEAD + methods + body


def test_all_seeds_and_contract_examples_pass():
    sources = [load_seed_source(s.name) for s in list_seeds()] + list(contract_examples().values())
    for source in sources:
        report = check_static(source)
        assert report.ok, report.reason


@pytest.mark.parametrize(
    "body, top",
    [
        ("    def __init__(self, max_turns=25, **kw):\n        super().__init__(max_turns, **kw)\n", ""),
        ("    def name(self):\n        return type(self).__name__\n", ""),
        ("    def call_it(self, name):\n        return getattr(self, 'cmd_' + name, None)\n", ""),
        ("", "import collections.abc\nfrom collections import Counter, deque\nimport json as j\n"),
        ("", "from __future__ import annotations\nfrom dataclasses import dataclass, field\n"),
        ("", "from spade_jax.envs.base import extract_boxed\nimport spade_jax.envs.base as base\n"),
        ("", "if __name__ == '__main__':\n    print('demo')\n"),
        ("    def hint(self) -> str:\n        return 'Use __init__ wisely.'\n", ""),
        ("    def opener(self):\n        self.open_doors = 3\n        return self.open_doors\n", ""),
    ],
)
def test_ordinary_code_is_not_flagged(body, top):
    report = check_static(game(body, top))
    assert report.ok, report.reason
    assert report.class_name == "G" and report.base == "GameEnv"


@pytest.mark.parametrize(
    "body, top, reason",
    [
        ("    def f(self):\n        return vars(self)\n", "", "'vars'"),
        ("    def f(self):\n        return self.__dict__\n", "", "__dict__"),
        ("    def f(self):\n        return (x for x in []).gi_frame\n", "", "gi_frame"),
        ("    def f(self):\n        return '{0.__class__}'.format(self)\n", "", "__class__"),
        ("    def f(self):\n        return '{0._G__x}'.format(self)\n", "", "format string"),
        ("", "import dataclasses\nsys_mod = dataclasses.sys\n", "module 'sys'"),
        ("", "from dataclasses import sys\n", "module 'sys'"),
        ("", "import typing\nhints = typing.get_type_hints\n", "evaluates strings"),
        ("", "from random import _os\n", "private"),
        ("", "import random\nos_mod = getattr(random, '_os')\n", "private attribute random._os"),
        ("", "import random\nname = '_' + 'os'\nos_mod = getattr(random, name)\n", "computed name"),
        ("", "import dataclasses\nsys_mod = getattr(dataclasses, 'sys')\n", "module 'sys'"),
        ("", "import typing\nhints = getattr(typing, 'get_type_hints')\n", "evaluates strings"),
        ("", "import importlib\n", "'importlib'"),
        ("", "from . import helpers\n", "relative import"),
        ("", "from spade_jax.envs import host_pool\n", "spade_jax.envs"),
        ("    def f(self):\n        return breakpoint()\n", "", "'breakpoint'"),
        ("    def f(self):\n        return compile('1', 'x', 'eval')\n", "", "'compile'"),
        ("    def f(self):\n        setattr(self, '__class__', int)\n", "", "setattr"),
    ],
)
def test_hostile_idioms_are_flagged(body, top, reason):
    report = check_static(game(body, top))
    assert not report.ok
    assert reason in report.reason, report.reason
    assert "\n" not in report.reason


def test_size_bounds():
    big = game("", "# " + "x" * 70 + "\n") + "\n".join(f"X{i} = {i}" for i in range(4000))
    assert "limit" in check_static(big).reason
    small = StaticConfig(max_lines=5)
    assert "lines, over the 5 limit" in check_static(game(""), small).reason
    nested = "x = " + "[" * 150 + "]" * 150 + "\n"
    report = check_static(nested)
    assert not report.ok and ("nest" in report.reason or "syntax" in report.reason)


def test_null_bytes_and_non_str():
    assert not check_static("x = 1\x00\n").ok
    assert not check_static("").ok


def test_symbol_table_errors_are_syntax_errors():
    report = check_static(game("    def f(self, a, a):\n        return a\n"))
    assert not report.ok and "syntax error" in report.reason


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            "class R:\n    def __init__(self, size, max_turns=25):\n        pass\n"
            "    def reset(self, seed=None):\n        pass\n    def step(self, a):\n        pass\n",
            "requires argument(s) size",
        ),
        (
            "class R:\n    def __init__(self, max_turns=25):\n        pass\n"
            "    def reset(self, seed=None):\n        pass\n    def step(self):\n        pass\n",
            "step() must take exactly one action",
        ),
        ("x = 1\n", "no environment class"),
        (game("    def hint(self, level):\n        return 'x'\n"), "hint() must take 0 argument"),
    ],
)
def test_contract_shape(source, reason):
    report = check_static(source)
    assert not report.ok and reason in report.reason, report.reason


def test_a_plain_class_may_keep_its_own_turn_cap():
    """The paper's format: no base class, no __init__ or one without max_turns (built with no arguments)."""
    for init in ("", "    def __init__(self, size=5):\n        self.size = size\n"):
        source = (
            f"class R:\n{init}    def reset(self, seed=None):\n        pass\n    def step(self, a):\n        pass\n"
        )
        assert check_static(source).ok, source


def test_local_base_class_chain_counts_as_one_environment():
    source = (
        "import random\n\nclass Base:\n    def __init__(self, max_turns=25):\n        self.max_turns = max_turns\n"
        "    def reset(self, seed=None):\n        return 'x', {}\n    def step(self, a):\n"
        "        return 'x', 0.0, True, False, {}\n\nclass Leaf(Base):\n    pass\n"
    )
    report = check_static(source)
    assert report.ok and report.class_name == "Leaf"
