"""Logical deduction: a Mastermind-style game; deduce a hidden 4-digit code from bulls/cows feedback."""

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

    def setup(self) -> str:
        self.secret = "".join(self.rng.choice("123456") for _ in range(4))
        self.history: list[tuple[str, int, int]] = []
        self.guesses_left = 10
        return (
            "Guess my secret code: 4 digits, each from 1 to 6 (digits may repeat). After each guess I "
            "tell you BULLS (right digit, right place) and COWS (right digit, wrong place). You have 10 "
            "guesses; find the code to win. Reply with a guess in a box, e.g. \\boxed{1122}."
        )

    def play(self, command: str):
        guess = command.replace(" ", "")
        if len(guess) != 4 or any(c not in "123456" for c in guess):
            return "Invalid guess: send exactly 4 digits from 1-6, e.g. \\boxed{1234}."
        self.guesses_left -= 1
        bulls, cows = score(self.secret, guess)
        self.history.append((guess, bulls, cows))
        if bulls == 4:
            return self.win(f"{guess}: 4 bulls. You cracked the code!")
        if self.guesses_left == 0:
            return self.lose(f"{guess}: {bulls} bulls, {cows} cows. Out of guesses; the code was {self.secret}.")
        past = "; ".join(f"{g}={b}B{c}C" for g, b, c in self.history)
        return f"{guess}: {bulls} bulls, {cows} cows. {self.guesses_left} guesses left. History: {past}"

    def hint(self) -> str:
        digits = len(set(self.secret))
        return (
            f"The code uses {digits} distinct digit(s). Make every new guess consistent with all "
            "feedback so far; early guesses like 1122 and 3344 reveal which digits appear."
        )

    def reference_action(self) -> str:
        # An honest solver: the first code consistent with all feedback so far.
        for combo in itertools.product("123456", repeat=4):
            cand = "".join(combo)
            if all(score(cand, g) == (b, c) for g, b, c in self.history):
                return self.boxed(cand)
        return self.boxed(self.secret)

    def random_action(self, rng) -> str:
        return self.boxed("".join(rng.choice("123456") for _ in range(4)))
