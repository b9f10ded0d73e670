# expect: random_play
# reason: trivially winnable
"""Passes the paper's validator, refused by ours: three cups and three tries, so random
guessing wins far more often than 15% of the time."""

import random
import re


class CupShuffleEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.ball = random.Random(seed).randint(1, 3)
        self.tries = 0
        return "A ball is under cup 1, 2 or 3. Which one? Reply like \\boxed{2}. Three tries.", {}

    def step(self, action):
        self.tries += 1
        m = re.search(r"\\boxed\{(\d+)\}", action or "")
        if m and m.group(1) == str(self.ball):
            return "Found it!", 1.0, True, False, {}
        return "Empty cup. Try cup 1, 2 or 3.", 0.0, self.tries >= 3, False, {}
