# expect: termination
# reason: no-op actions did not end
import random
import re


class FreeRetries:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 200)
        self.turn = 0
        return "Guess my number from 1 to 200 in 8 tries, e.g. \\boxed{100}.", {}

    def step(self, action):
        m = re.search(r"\\boxed\{(\d+)\}", action)
        if not m:
            return "Invalid guess (not counted).", 0.0, False, False, {}
        self.turn += 1
        if int(m.group(1)) == self.secret:
            return "Right!", 1.0, True, False, {"won": True}
        return "Wrong.", 0.0, self.turn >= 8, False, {"won": False}
