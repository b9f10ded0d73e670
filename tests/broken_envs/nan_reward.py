# expect: step
# reason: (not finite|non-finite)
import math
import random
import re


class Ratio:
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
        guess = int(m.group(1)) if m else 0
        won = guess == self.secret
        # closeness score; 0 * inf is nan when the guess is missing
        reward = 1.0 if won else 0.0 * (math.inf if guess == 0 else 1.0)
        return ("Right" if won else "Wrong"), reward, won, self.turn >= self.max_turns, {}
