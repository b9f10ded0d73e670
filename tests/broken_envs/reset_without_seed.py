# expect: static
# reason: reset\(\) does not accept seed
import random


class Unseeded:
    def __init__(self, max_turns=25):
        self.max_turns = max_turns

    def reset(self):
        self.secret = random.randint(1, 200)
        self.turn = 0
        return "Guess a number from 1 to 200 in \\boxed{}.", {}

    def step(self, action):
        self.turn += 1
        won = action.strip() == f"\\boxed{{{self.secret}}}"
        return ("Right" if won else "Wrong"), float(won), won, self.turn >= self.max_turns, {}
