# expect: step
# reason: 5-tuple
"""Caught by the paper's validator too: step() returns the old Gym 4-tuple (obs, reward, done, info)."""

import random
import re


class OldGymDiceEnv:
    def __init__(self, max_turns=6):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.dice = [rng.randint(1, 6) for _ in range(3)]
        self.turn = 0
        return f"Three dice show {self.dice[0]}, {self.dice[1]} and ?. Their sum is {sum(self.dice)}. " \
               "What is the hidden die? Reply like \\boxed{3}.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d)\}", action or "")
        won = bool(m) and int(m.group(1)) == self.dice[2]
        done = won or self.turn >= self.max_turns
        return ("Right." if won else "Wrong."), float(won), done, {"turn": self.turn}
