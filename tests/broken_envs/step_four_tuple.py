# expect: step
# reason: 5-tuple
import random
import re


class GymV21:
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
        done = won or self.turn >= self.max_turns
        return ("Right" if won else "Wrong"), float(won), done, {}
