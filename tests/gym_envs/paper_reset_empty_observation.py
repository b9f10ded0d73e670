# expect: reset
# reason: reset() returned an empty observation
"""Caught by the paper's validator too: reset() returns an empty observation (the prompt went into info)."""

import random
import re


class SilentStartEnv:
    def __init__(self, max_turns=8):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.secret = rng.randint(1, 100)
        self.turn = 0
        return "", {"prompt": "Guess my number from 1 to 100, e.g. \\boxed{50}."}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d+)\}", action or "")
        guess = int(m.group(1)) if m and len(m.group(1)) < 6 else None
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {}
        hint = "higher" if guess is not None and guess < self.secret else "lower"
        return hint, 0.0, False, self.turn >= self.max_turns, {}
