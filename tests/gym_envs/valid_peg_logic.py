# expect: valid
# reason: valid game environment PegLogicEnv
"""A Mastermind-like code-breaking game in the paper's Gym-style format, multi-turn, with partial credit.

A hidden code of four colours (repeats allowed); each guess is scored with exact hits (right colour, right
slot) and near hits (right colour, wrong slot). Cracking the code pays 1.0; running out of guesses pays
0.2 per exact hit of the best guess. A malformed guess costs a small format penalty (-0.1) but no guess.
"""

import random
import re

COLOURS = ("red", "green", "blue", "yellow", "orange", "purple")


class PegLogicEnv:
    SLOTS = 4
    GUESSES = 10

    def __init__(self, max_turns=14):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.code = [rng.choice(COLOURS) for _ in range(self.SLOTS)]
        self.guesses_left = self.GUESSES
        self.best_exact, self.turn, self.done = 0, 0, False
        self.history = []
        obs = (
            f"Crack the hidden code of {self.SLOTS} colours (repeats allowed) chosen from: {', '.join(COLOURS)}.\n"
            "After each guess you learn how many pegs are exact (right colour, right slot) and how many are near "
            "(right colour, wrong slot). Guess with four colours separated by spaces, e.g. "
            f"\\boxed{{red red blue green}}. You have {self.GUESSES} guesses."
        )
        return obs, {"guesses_left": self.guesses_left}

    def solution(self):
        return "\\boxed{" + " ".join(self.code) + "}"

    def hint(self):
        return "Start with guesses that use only one or two colours, so that each score tells you more."

    def score(self, guess):
        exact = sum(g == c for g, c in zip(guess, self.code))
        common = sum(min(guess.count(col), self.code.count(col)) for col in COLOURS)
        return exact, common - exact

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn += 1
        m = re.search(r"\\boxed\{([^{}]*)\}", action or "")
        guess = re.findall(r"[a-z]+", m.group(1).lower()) if m else []
        info = {"turn": self.turn, "guesses_left": self.guesses_left}
        if len(guess) != self.SLOTS or any(g not in COLOURS for g in guess):
            feedback, reward = f"A guess is {self.SLOTS} of: {', '.join(COLOURS)}, inside \\boxed{{...}}.", -0.1
        else:
            exact, near = self.score(guess)
            self.guesses_left -= 1
            self.best_exact = max(self.best_exact, exact)
            self.history.append((" ".join(guess), exact, near))
            info.update(guesses_left=self.guesses_left, exact=exact, near=near)
            if exact == self.SLOTS:
                self.done = True
                return f"Cracked it in {len(self.history)} guesses!", 1.0, True, False, info
            if self.guesses_left == 0:
                self.done = True
                credit = round(0.2 * self.best_exact, 3)
                return f"Out of guesses; the code was {' '.join(self.code)}.", credit, True, False, info
            feedback, reward = f"{exact} exact, {near} near. {self.guesses_left} guesses left.", 0.0
        if self.turn >= self.max_turns:
            self.done = True
            return feedback + " Out of turns.", 0.0, False, True, info
        return feedback, reward, False, False, info
