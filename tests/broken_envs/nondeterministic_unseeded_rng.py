# expect: determinism
# reason: different transcript
import random

from spade_jax.envs.base import GameEnv


class FreshDice(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "fresh_dice"

    def setup(self) -> str:
        dice = random.Random()  # a fresh RNG seeded from the OS, not from reset(seed)
        self.secret = dice.randint(1, 200)
        self.left = 8
        return f"Guess my number from 1 to 200 in 8 tries, e.g. \\boxed{{100}}. (table {dice.randint(1, 99)})"

    def play(self, command: str):
        if not command.isdigit():
            return "Send a whole number, e.g. \\boxed{100}."
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose(f"It was {self.secret}.")
        return "higher" if guess < self.secret else "lower"
