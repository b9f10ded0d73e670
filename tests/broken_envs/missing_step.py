# expect: static
# reason: step\(\)
import random


class HalfDone:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret = self.rng.randint(1, 200)
        return "Guess a number from 1 to 200 in \\boxed{}.", {}

    def act(self, action):
        return "nothing", 0.0, False, False, {}
