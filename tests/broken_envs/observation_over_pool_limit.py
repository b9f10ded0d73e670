# expect: step
# reason: returned bad data: returned \d+ bytes of JSON
from spade_jax.envs.base import GameEnv


class Flood(GameEnv):
    KIND = "game"
    SKILL = "memory recall"
    NAME = "flood"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        self.left = 8
        return "Guess my number from 1 to 200 in 8 tries, e.g. \\boxed{100}."

    def play(self, command: str):
        if not command.isdigit():
            return "Invalid. " + "Send a whole number! " * 5000  # a 100 KB complaint
        guess = int(command)
        self.left -= 1
        if guess == self.secret:
            return self.win()
        if self.left == 0:
            return self.lose(f"It was {self.secret}.")
        return "higher" if guess < self.secret else "lower"
