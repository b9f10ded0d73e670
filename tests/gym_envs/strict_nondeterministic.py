# expect: determinism
# reason: different transcript
"""Passes the paper's validator, refused by ours: the same seed does not give the same episode (the RNG is
seeded from the seed and an episode counter, "so that every game is fresh")."""

import random
import re


class FreshVaultEnv:
    def __init__(self, max_turns=12):
        self.max_turns = max_turns
        self.episodes = 0

    def reset(self, seed=None):
        self.episodes += 1
        self.rng = random.Random(f"{seed}/{self.episodes}")
        self.code = self.rng.randint(100, 999)
        self.turn = 0
        return "Open the vault: guess its 3-digit code, e.g. \\boxed{500}; I say higher or lower.", \
            {"episode": self.episodes}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{(\d{1,4})\}", action or "")
        guess = int(m.group(1)) if m else None
        if guess == self.code:
            return "The vault opens!", 1.0, True, False, {"turn": self.turn}
        hint = "Send a number." if guess is None else ("higher" if guess < self.code else "lower")
        return hint, 0.0, False, self.turn >= self.max_turns, {"turn": self.turn}
