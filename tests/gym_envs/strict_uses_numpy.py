# expect: static
# reason: uses numpy
"""Passes the paper's validator, refused by ours: uses numpy's RNG (`np`, unimported, as the paper's loader
allows); our sandbox runs the standard library only."""

import re


class DiceSumEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = np.random.default_rng(seed)
        self.dice = [int(x) for x in self.rng.integers(1, 7, size=4)]
        self.turn = 0
        return f"Four dice: {self.dice[:3]} and one hidden; the total is {sum(self.dice)}. Hidden die? " \
               "Reply like \\boxed{4}.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d+)\}", action or "")
        won = bool(m) and int(m.group(1)) == self.dice[3]
        return ("Right." if won else "Wrong."), float(won), True, False, {}
