"""Class 2 of issue 47: the hint, as a tell and as a leak.

A. The leak check as a tell (tests/hostile/hint_leakcheck.py, hint_maxreward.py): what the check runs inside the
   environment's process (reference_action() on a copy) marked the hinted plays, which then won. The hint and its
   check now run in a session of their own; the played session sees reset and step only. The agent ignores the
   hint and guesses at random, so the true regret is 0: contained means a regret near 0 and no maximum designer
   reward (or a violation).
B. Hints that carry the answer in another spelling (number words, letters spelled out, an option the observation
   lists, a plain answer with the echo check dodged by counting resets; controls: one digit, a quoted capitalised
   word), the environment's own hint() read by an agent as a model would: contained means the hint is found
   leaking (a violation, since the environment wrote it), so it earns no regret. Also a model-written hint that
   states a constant answer: leaked (no regret), not held against the environment.
The agent is a script; the pool, rollouts, audit and window scoring are the real ones.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from test_containment_checkers import chatty, measure

HOSTILE = Path(__file__).resolve().parent / "hostile"
POOL_WORKERS = 2
POOL_CALL_TIMEOUT_S = 5.0
MODEL_HINT = "Use binary search: always guess the middle of the range that is still possible, then halve it."
_NUM = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                   "fourteen fifteen sixteen seventeen eighteen nineteen".split())}  # fmt: skip
_NUM.update({w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
             if w != "_"})  # fmt: skip


def hint_text(req) -> str | None:
    m = re.search(r"HINT: (.*)", req.messages[0]["content"], re.S)
    return m.group(1).strip() if m else None


def random_guess(req) -> str:
    return chatty(random.Random(req.spec.seed * 31 + req.turn).randint(1, 100))


def reading(reader, fallback):
    """An agent that reads the hint as a model would, and guesses without one."""

    def act(req):
        h = hint_text(req)
        return chatty(reader(h) if h else fallback(req))

    return act


READERS = {
    "hint_numberword": lambda h: (re.search(r"\d+", h).group(0) if re.search(r"\d", h) else
                                  sum(_NUM[p] for p in re.search(r"of ([a-z-]+)", h).group(1).split("-"))),
    "hint_spelled": lambda h: "".join(re.search(r"are ([a-z ]+),", h).group(1).split()),
    "hint_in_observation": lambda h: re.search(r"Pick (\w+)", h).group(1),
    "hint_hidden_state": lambda h: re.search(r"\d+", h).group(0),
    "hint_single_digit": lambda h: re.search(r"\d+", h).group(0),
    "hint_quoted": lambda h: re.search(r"'(\w+)'", h).group(1),
}  # fmt: skip


@pytest.mark.sandbox
@pytest.mark.parametrize("name", ["hint_leakcheck", "hint_maxreward"])
def test_the_leak_check_is_no_tell(pool, tokenizer, tmp_path, name):
    row, _ = measure(pool, tokenizer, tmp_path, name, (HOSTILE / f"{name}.py").read_text(), random_guess,
                     hint=MODEL_HINT, plays=3)  # fmt: skip
    assert row["violation"] or (row["regret"] <= 0.25 and row["designer_reward"] < 0.6), row


@pytest.mark.sandbox
@pytest.mark.parametrize("name", sorted(READERS))
def test_a_hint_that_carries_the_answer_is_a_leak(pool, tokenizer, tmp_path, name):
    agent = reading(READERS[name], lambda req: random.Random(req.spec.seed).randint(10, 99))
    row, stats = measure(pool, tokenizer, tmp_path, name, (HOSTILE / f"{name}.py").read_text(), agent,
                         env_hint=True, plays=3)  # fmt: skip
    assert row["violation"].startswith("the hint gives the answer away") and row["trained"] == 0, row
    assert stats["audit/hint_leaked"] == 1


CONSTANT = """
from spade_jax.envs.base import GameEnv


class ConstantGuess(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "constant_guess"

    def setup(self) -> str:
        return "Name the number I always pick, from 1 to 100. One try. Reply like \\\\boxed{50}."

    def play(self, command):
        return self.win("Right.") if command.strip() == "73" else self.lose("Wrong.")
"""


@pytest.mark.sandbox
def test_a_model_written_hint_that_states_the_answer_earns_no_regret(pool, tokenizer, tmp_path):
    """The model wrote the leak, not the environment: no regret for it, and no violation."""
    agent = reading(lambda h: re.search(r"\d+", h).group(0), lambda req: 50)
    row, _ = measure(pool, tokenizer, tmp_path, "constant", CONSTANT, agent, hint="It always picks 73.", plays=3)
    assert row["hint_status"] == "leaked" and row["regret"] == 0.0 and not row["violation"], row


def test_hint_candidates_cover_the_spellings_a_model_reads():
    """Hand-worked: each form of the red team's hints gives the answer among its first candidates."""
    from spade_jax.gates.audit import hint_candidates

    cases = {
        "Think of sixty-seven and write it in digits.": "67",
        "Its letters are r i c e, in that order.": "rice",
        "Pick tea.": "tea",
        "The number is 67.": "67",
        "The digit is 8.": "8",
        "Say 'Rice'.": "Rice",
        "Try Mint first, it is usually right.": "Mint",
        "one hundred and five": "105",
    }
    for hint, answer in cases.items():
        assert answer in hint_candidates(hint), (hint, hint_candidates(hint))
    assert len(hint_candidates(" ".join(f"word{i}" for i in range(100)))) <= 16
