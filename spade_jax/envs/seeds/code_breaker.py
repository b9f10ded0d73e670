"""Logical deduction: a Mastermind-style game; deduce a hidden digit code from bulls/cows feedback."""

import itertools

from spade_jax.envs.base import GameEnv


def score(secret: str, guess: str) -> tuple[int, int]:
    bulls = sum(s == g for s, g in zip(secret, guess))
    common = sum(min(secret.count(d), guess.count(d)) for d in set(guess))
    return bulls, common - bulls


class CodeBreaker(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "code_breaker"
    ACTION_EXAMPLE = "\\boxed{1122}"
    LENGTH = 4
    DIGITS = 6
    GUESSES = 10

    def setup(self) -> str:
        self.alphabet = "123456789"[: self.DIGITS]
        self.secret = "".join(self.rng.choice(self.alphabet) for _ in range(self.LENGTH))
        self.history: list[tuple[str, int, int]] = []
        self.guesses_left = self.GUESSES
        return (
            f"Guess my secret code: {self.LENGTH} digits, each from 1 to {self.DIGITS} (digits may repeat). "
            "After each guess I tell you BULLS (right digit, right place) and COWS (right digit, wrong place). "
            f"You have {self.GUESSES} guesses; find the code to win. Reply with a guess in a box, e.g. "
            f"\\boxed{{{'12' * (self.LENGTH // 2) + '1' * (self.LENGTH % 2)}}}."
        )

    def play(self, command: str):
        guess = command.replace(" ", "")
        if len(guess) != self.LENGTH or any(c not in self.alphabet for c in guess):
            return f"Invalid guess: send exactly {self.LENGTH} digits from 1-{self.DIGITS}."
        self.guesses_left -= 1
        bulls, cows = score(self.secret, guess)
        self.history.append((guess, bulls, cows))
        if bulls == self.LENGTH:
            return self.win(f"{guess}: {bulls} bulls. You cracked the code!")
        if self.guesses_left == 0:
            return self.lose(f"{guess}: {bulls} bulls, {cows} cows. Out of guesses; the code was {self.secret}.")
        past = "; ".join(f"{g}={b}B{c}C" for g, b, c in self.history)
        return f"{guess}: {bulls} bulls, {cows} cows. {self.guesses_left} guesses left. History: {past}"

    def hint(self) -> str:
        digits = len(set(self.secret))
        return (
            f"The code uses {digits} distinct digit(s). Make every new guess consistent with all "
            "feedback so far; early guesses that repeat two digits reveal which digits appear."
        )

    def reference_action(self) -> str:
        # An honest solver: the first code consistent with all feedback so far.
        for combo in itertools.product(self.alphabet, repeat=self.LENGTH):
            cand = "".join(combo)
            if all(score(cand, g) == (b, c) for g, b, c in self.history):
                return self.boxed(cand)
        return self.boxed(self.secret)

    def random_action(self, rng) -> str:
        return self.boxed("".join(rng.choice(self.alphabet) for _ in range(self.LENGTH)))
