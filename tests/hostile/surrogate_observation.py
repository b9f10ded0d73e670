"""A fair guessing game whose texts carry lone surrogates: JSON sends `\\udc80` as an escape, and a host that
passes the decoded string on raw crashes its tokenizer, its SQLite memory and print(). Passes every gate."""

import random

ODD = "caf\udc80 \ud800\udfff\udbff"


class SurrogateObservation:
    def __init__(self, max_turns=25, **kw):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self.secret, self.turn = self.rng.randint(1, 999), 0
        info = {"kind": "game", ODD: ODD, "notes": [ODD, {"deeper": ODD}]}
        return f"Guess my number ({ODD}) from 1 to 999 in 5 tries: reply \\boxed{{n}}.", info

    def step(self, action):
        self.turn += 1
        won = action.strip() == f"\\boxed{{{self.secret}}}"
        done = won or self.turn >= 5
        return f"{'Right' if won else 'Wrong'} {ODD}", 1.0 if won else 0.0, done, False, {ODD: self.turn}

    def hint(self):
        return f"It is not {ODD}."

    def random_action(self, rng):
        rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        return f"\\boxed{{{rng.randint(1, 999)}}}"
