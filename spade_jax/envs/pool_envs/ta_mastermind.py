"""Mastermind with textarena's Mastermind-v0 rules (4 distinct digits 1-6, 20 turns, black/white pegs); our code."""

from spade_jax.envs.base import GameEnv


class Mastermind(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "ta_mastermind"
    ACTION_EXAMPLE = "\\boxed{1 2 3 4}"
    LENGTH = 4
    DIGITS = 6
    TURNS = 20

    def setup(self) -> str:
        self.code = self.rng.sample(range(1, self.DIGITS + 1), self.LENGTH)
        self.left = self.TURNS
        self.history = []
        return (
            f"Guess my secret code: {self.LENGTH} different digits from 1 to {self.DIGITS}. After each guess you get "
            "black pegs (right digit, right place) and white pegs (right digit, wrong place). You have "
            f"{self.TURNS} guesses. Reply with your guess in a box, e.g. \\boxed{{1 2 3 4}}."
        )

    def play(self, command: str):
        digits = [c for c in command if c.isdigit()]
        if len(digits) != self.LENGTH or any(not 1 <= int(d) <= self.DIGITS for d in digits):
            return f"Invalid guess: give {self.LENGTH} digits from 1 to {self.DIGITS}, e.g. \\boxed{{1 2 3 4}}."
        guess = [int(d) for d in digits]
        self.left -= 1
        black = sum(g == c for g, c in zip(guess, self.code))
        white = sum(min(guess.count(d), self.code.count(d)) for d in set(guess)) - black
        self.history.append((guess, black, white))
        if black == self.LENGTH:
            return self.win("You cracked the code. You win!")
        if self.left == 0:
            return self.lose(f"Out of guesses; the code was {' '.join(map(str, self.code))}. You lose.")
        return f"{' '.join(digits)}: {black} black, {white} white. {self.left} guesses left."

    def _consistent(self, cand) -> bool:
        for guess, black, white in self.history:
            b = sum(g == c for g, c in zip(guess, cand))
            w = sum(min(guess.count(d), cand.count(d)) for d in set(guess)) - b
            if (b, w) != (black, white):
                return False
        return True

    def reference_action(self) -> str:
        return self.boxed(" ".join(map(str, self.code)))

    def random_action(self, rng) -> str:
        return self.boxed(" ".join(map(str, rng.sample(range(1, self.DIGITS + 1), self.LENGTH))))

    def hint(self) -> str:
        return "Keep only codes consistent with every earlier feedback and guess one of them each turn."
