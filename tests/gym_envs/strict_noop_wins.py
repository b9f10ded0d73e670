# expect: termination
# reason: a no-op reply
"""Passes the paper's validator, refused by ours: a substring check lets the empty answer win (every word
contains the empty string)."""

import random
import re

WORDS = ["planet", "violin", "harvest", "compass", "lighthouse", "marble"]


class WordPartEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.word = random.Random(seed).choice(WORDS)
        self.turn = 0
        return f"My word has {len(self.word)} letters. Name it, e.g. \\boxed{{apple}}.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{([^{}]*)\}", action or "")
        if m and m.group(1).strip().lower() in self.word:
            return "That's my word!", 1.0, True, False, {}
        return "No.", 0.0, self.turn >= self.max_turns, False, {}
