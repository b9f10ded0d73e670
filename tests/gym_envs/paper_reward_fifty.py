# expect: step
# reason: outside [-1, 1]
"""Caught by the paper's validator too (|reward| > 10): every surviving step pays 50 points, not a fraction."""

import random
import re


class TrapDoorEnv:
    def __init__(self, max_turns=10):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.trap = rng.randint(1, 4)
        self.turn = 0
        return "Four doors, one hides a trap. Open a door each turn, e.g. \\boxed{2}; each safe door pays 50.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d+)\}", action or "")
        if m and m.group(1) == str(self.trap):
            return "The trap door! Game over.", 0.0, True, False, {"turn": self.turn}
        return "Safe. +50 points.", 50.0, False, self.turn >= self.max_turns, {"turn": self.turn}
