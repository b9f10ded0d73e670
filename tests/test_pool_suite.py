"""`spade-jax eval --pool DIR`: environments of a pool directory (either contract) played in the sandbox.

The players are scripted (a binary-search solver and a constant guesser) so the outcome is known; the
environments and the sandbox are real.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spade_jax.eval.agent import ScriptedModel
from spade_jax.eval.core import EvalContext
from spade_jax.eval.pool_suite import PoolSuite
from spade_jax.eval.sandboxed import default_runner

# The paper's format, written for this test: no base class, `random` and `re` used without import.
HIGHER_LOWER = """
class HigherLowerEnv:
    def __init__(self, max_turns=8):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.secret, self.turn = random.Random(seed).randint(1, 100), 0
        return "Guess my number from 1 to 100 as \\\\boxed{n}; I say Higher or Lower.", {}

    def step(self, action):
        self.turn += 1
        m = re.findall(r"\\\\boxed\\{(\\d+)\\}", action)
        if m and int(m[-1]) == self.secret:
            return "Correct!", 1.0, True, False, {}
        if self.turn >= self.max_turns:
            return "Out of guesses.", 0.0, True, False, {}
        if not m:
            return "Answer as \\\\boxed{n}.", 0.0, False, False, {}
        return ("Higher" if int(m[-1]) < self.secret else "Lower"), 0.0, False, False, {}
"""
BROKEN = """
class BrokenEnv:
    def reset(self, seed=None):
        raise RuntimeError("no board")

    def step(self, action):
        return "", 0.0, True, False, {}
"""


def _bisect(messages: list[dict]) -> str:
    lo, hi = 1, 100
    for prev, reply in zip(messages, messages[1:]):
        if prev["role"] == "assistant":
            guess = int(re.findall(r"\d+", prev["content"])[-1])
            if reply["content"].startswith("Higher"):
                lo = guess + 1
            elif reply["content"].startswith("Lower"):
                hi = guess - 1
    return f"\\boxed{{{(lo + hi) // 2}}}"


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pool")
    (d / "higher_lower.py").write_text(HIGHER_LOWER)
    (d / "broken.py").write_text(BROKEN)
    return d


@pytest.fixture(scope="module")
def ctx():
    context = EvalContext(runner_factory=lambda: default_runner("auto", 2))
    yield context
    context.runner.close()


def test_a_solver_wins_every_play_and_a_broken_env_is_a_lost_play(pool_dir: Path, ctx: EvalContext):
    suite = PoolSuite(str(pool_dir), plays=2)
    res = suite.run(ScriptedModel(_bisect), suite.load(), ctx)
    assert res.metrics["win_rate/higher_lower"] == 1.0  # binary search finds 1..100 in 7 guesses
    assert res.metrics["win_rate/broken"] == 0.0 and res.metrics["errors"] == 2.0
    broken = [r for r in res.items if r.reference == "broken"]
    assert all("reset failed" in r.error and "no board" in r.error for r in broken)
    assert res.metrics["win_rate"] == 0.5


def test_a_constant_guesser_loses_on_these_seeds(pool_dir: Path, ctx: EvalContext):
    suite = PoolSuite(str(pool_dir), plays=2)
    items = [it for it in suite.load() if it["env"].name == "higher_lower"]
    res = suite.run(ScriptedModel(lambda m: "\\boxed{50}"), items, ctx)
    # The held-out seeds' secrets are 53 and 83; the suite passes max_turns=10, the game's own cap yields to it.
    assert res.metrics["win_rate"] == 0.0 and all(r.prediction == suite.max_turns == 10 for r in res.items)


def test_cli_refuses_a_bad_pool_before_loading_a_model(tmp_path: Path, capsys):
    from spade_jax.cli import main

    assert main(["eval", "--model", "smollm2-135m", "--pool", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "unknown pool" in err and err.count("\n") == 1
