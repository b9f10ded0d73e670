# expect: determinism
# reason: different transcript.*step
import random

from spade_jax.envs.base import GameEnv


class Moody(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "moody"

    def __init__(self, max_turns=25, **kwargs):
        super().__init__(max_turns, **kwargs)
        self.mood = random.Random()  # created once, never reseeded: replies drift between episodes

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        self.left = 8
        return "Guess my number from 1 to 200 in 8 tries, e.g. \\boxed{100}."

    def play(self, command: str):
        if not command.isdigit():
            return self.mood.choice(["Numbers only, please.", "That is not a number.", "Try a number."])
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose(f"It was {self.secret}.")
        return "higher" if guess < self.secret else "lower"
