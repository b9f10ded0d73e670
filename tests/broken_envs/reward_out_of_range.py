# expect: step
# reason: outside \[-1, 1\]
import random
import re


class BigPayout:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 200)
        self.turn = 0
        return "Guess a number from 1 to 200, e.g. \\boxed{100}. A win pays 100 points.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d+)\}", action)
        if not m:
            return "Use \\boxed{n}.", -5.0, False, self.turn >= self.max_turns, {}
        won = int(m.group(1)) == self.secret
        return ("Right" if won else "Wrong"), 100.0 if won else 0.0, won, self.turn >= self.max_turns, {}
