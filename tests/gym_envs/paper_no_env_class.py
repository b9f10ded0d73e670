# expect: static
# reason: no environment class
"""Caught by the paper's validator too: the class has no reset()/step() (it uses its own method names)."""

import random
import re


class RiddleEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def start(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 50)
        return "I am thinking of a number from 1 to 50. Reply like \\boxed{25}.", {}

    def act(self, action):
        m = re.search(r"\\boxed\{(\d+)\}", action)
        won = bool(m) and int(m.group(1)) == self.secret
        return ("Yes!" if won else "No."), float(won), True, False, {}
