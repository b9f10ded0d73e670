"""Well-behaved plain class (no base): a random walk whose state is drawn from its own seeded Random."""

import math
import random


class PlainWalk:
    def __init__(self, max_turns=10, scale=1.0):
        self.max_turns, self.scale = max_turns, scale

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.pos, self.turn = self.rng.uniform(-1, 1), 0
        return f"position {self.pos:.6f}", {"pos": self.pos, "seed": seed}

    def step(self, action):
        self.turn += 1
        move = {"left": -0.1, "right": 0.1}.get(action.strip(), 0.0) * self.scale
        self.pos += move + self.rng.gauss(0, 0.05)
        reward = max(-1.0, min(1.0, 1.0 - abs(self.pos)))
        done = abs(self.pos) < 0.05
        trunc = self.turn >= self.max_turns
        info = {"turn": self.turn, "pos": self.pos, "sqrt": math.sqrt(abs(self.pos)), "path": [self.turn] * 3}
        return f"now at {self.pos:.6f}", reward, done, trunc and not done, info
