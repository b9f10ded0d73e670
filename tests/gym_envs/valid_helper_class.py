# expect: valid
# reason: valid game environment CountdownEnv
"""A helper class with reset()/step() of its own beside the environment: the class named ...Env is the one
played (the paper's loader rule), by the static gate and the worker alike."""

import random, re


class Stopwatch:
    def reset(self):
        self.t = 0

    def step(self, n=1):
        self.t += n


class CountdownEnv:
    def __init__(self, max_turns=10):
        self.max_turns = max_turns
        self.clock = Stopwatch()

    def reset(self, seed=None):
        self.secret = random.Random(seed).randint(1, 500)
        self.clock.reset()
        return "Guess 1..500 like \\boxed{250}.", {}

    def step(self, action):
        self.clock.step()
        m = re.search(r"\\boxed\{(\d{1,4})\}", action or "")
        won = bool(m) and int(m.group(1)) == self.secret
        return "ok", float(won), won, self.clock.t >= self.max_turns, {}

    def solution(self):
        return "\\boxed{%d}" % self.secret
