# expect: valid
# reason: valid game environment AgeOrderEnv
"""Logical deduction in the paper's Gym-style format: order five people by age from pairwise clues.

Plain class, `max_turns` in __init__, one boxed answer per episode, and a `solution()` method.
"""

import random
import re

PEOPLE = ["Amara", "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Greta", "Hiro", "Ingrid", "Joaquin",
          "Kofi", "Lucia"]
ORDINALS = ["oldest", "second oldest", "third oldest", "fourth oldest", "youngest"]


class AgeOrderEnv:
    def __init__(self, max_turns=6):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.order = rng.sample(PEOPLE, 5)  # oldest first
        pairs = [(self.order[i], self.order[i + 1]) for i in range(4)]
        i, j = sorted(rng.sample(range(5), 2))
        if j - i > 1:
            pairs.append((self.order[i], self.order[j]))  # one redundant clue
        clues = []
        for older, younger in pairs:
            if rng.random() < 0.5:
                clues.append(f"{older} is older than {younger}.")
            else:
                clues.append(f"{younger} is younger than {older}.")
        rng.shuffle(clues)
        self.rank = rng.randrange(5)
        self.turn = 0
        self.done = False
        names = sorted(self.order)
        text = (
            f"Five friends ({', '.join(names)}) all have different ages.\n"
            + "\n".join(f"- {c}" for c in clues)
            + f"\nWho is the {ORDINALS[self.rank]}? Reply with one name, e.g. \\boxed{{{names[0]}}}. "
            "You have one attempt."
        )
        return text, {"turn": 0}

    def solution(self):
        return "\\boxed{" + self.order[self.rank] + "}"

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        m = re.search(r"\\boxed\{([^{}]*)\}", action or "")
        if m is None or not m.group(1).strip():
            if self.turn >= self.max_turns:
                self.done = True
                return "Out of turns.", 0.0, False, True, {"turn": self.turn}
            return "Please answer with a name in \\boxed{...}.", -0.1, False, False, {"turn": self.turn}
        self.done = True
        guess = m.group(1).strip().lower()
        if guess == self.order[self.rank].lower():
            return "Correct!", 1.0, True, False, {"turn": self.turn, "correct": True}
        return "Wrong.", 0.0, True, False, {"turn": self.turn, "correct": False}
