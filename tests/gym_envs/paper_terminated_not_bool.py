# expect: step
# reason: terminated must be a bool
"""Caught by the paper's validator too: terminated is an int (0/1), not a bool."""

import random
import re


class FlagCountEnv:
    def __init__(self, max_turns=10):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.flags = rng.randint(3, 30)
        self.turn = 0
        return f"Count the flags: {' '.join(['F'] * self.flags)}. Reply like \\boxed{{12}}.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d+)\}", action or "")
        won = bool(m) and m.group(1) == str(self.flags)
        over = int(won or self.turn >= 3)
        return ("Correct." if won else "Wrong."), float(won), over, False, {"turn": self.turn}
