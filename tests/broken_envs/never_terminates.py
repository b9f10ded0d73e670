# expect: termination
# reason: did not end within max_turns
import random
import re


class Endless:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 200)
        return "Guess my number from 1 to 200, e.g. \\boxed{100}. Take as long as you like.", {}

    def step(self, action):
        m = re.search(r"\\boxed\{(\d+)\}", action)
        if m and int(m.group(1)) == self.secret:
            return "Right!", 1.0, True, False, {}
        return "Wrong, try again.", 0.0, False, False, {}
