# expect: valid
# reason: valid game environment SeenEnv
"""A set (and a tuple) in info, as the paper's games sometimes return: sent as a list sorted by repr, the same
whatever the hash order."""

import random, re


class SeenEnv:
    def __init__(self, max_turns=10):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.secret = random.Random(seed).randint(1, 500)
        self.seen, self.t = set(), 0
        return "Guess 1..500 like \\boxed{250}.", {"seen": self.seen, "pos": (0, 0)}

    def step(self, action):
        self.t += 1
        m = re.search(r"\\boxed\{(\d{1,4})\}", action or "")
        g = int(m.group(1)) if m else None
        self.seen.add(g)
        won = g == self.secret
        return "ok", float(won), won, self.t >= self.max_turns, {"seen": set(self.seen), "pos": (1, 2)}

    def solution(self):
        return "\\boxed{%d}" % self.secret
