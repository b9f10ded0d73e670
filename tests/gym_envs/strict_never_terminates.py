# expect: termination
# reason: did not end within max_turns
"""Passes the paper's validator, refused by ours: no turn cap, a wrong guess never ends the episode."""

import random
import re


class EndlessGuessEnv:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns  # stored, never used

    def reset(self, seed=None):
        self.secret = random.Random(seed).randint(1, 1000)
        return "Guess my number from 1 to 1000, e.g. \\boxed{500}. Keep trying until you get it.", {}

    def step(self, action):
        m = re.search(r"\\boxed\{(\d{1,5})\}", action or "")
        if m and int(m.group(1)) == self.secret:
            return "You got it!", 1.0, True, False, {}
        return "Not it. Try again.", 0.0, False, False, {}
