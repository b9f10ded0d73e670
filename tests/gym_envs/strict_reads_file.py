# expect: static
# reason: 'open'
"""Passes the paper's validator, refused by ours: reads a word list from disk with open() (with a built-in
fallback when the file is missing, so it runs anywhere)."""

import random
import re

FALLBACK = ["lemon", "river", "candle", "forest", "pillow", "garden", "rocket", "silver"]


class DictionaryWordEnv:
    def __init__(self, max_turns=6):
        self.max_turns = max_turns

    def reset(self, seed=None):
        try:
            with open("/usr/share/dict/words", encoding="utf-8") as f:
                words = [w.strip().lower() for w in f if w.strip().isalpha()]
        except OSError:
            words = FALLBACK
        self.word = random.Random(seed).choice(words or FALLBACK)
        self.turn = 0
        return f"Guess my {len(self.word)}-letter word, e.g. \\boxed{{apple}}.", {}

    def step(self, action):
        self.turn += 1
        m = re.search(r"\\boxed\{([a-z]+)\}", action or "")
        won = bool(m) and m.group(1) == self.word
        return ("Yes!" if won else "No."), float(won), won or self.turn >= self.max_turns, False, {}
