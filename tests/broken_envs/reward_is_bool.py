# expect: step
# reason: reward must be a float
import random
import re


class BoolReward:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 200)
        self.turn = 0
        return "Guess a number from 1 to 200, e.g. \\boxed{100}.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d+)\}", action)
        won = bool(m) and int(m.group(1)) == self.secret
        return ("Right" if won else "Wrong"), won, won, self.turn >= self.max_turns, {}
