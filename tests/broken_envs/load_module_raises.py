# expect: load
# reason: ZeroDivisionError
from spade_jax.envs.base import GameEnv

SCALE = {k: 100 // (k - 3) for k in range(1, 6)}


class Scaled(GameEnv):
    NAME = "scaled"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        return "Guess a number from 1 to 200, e.g. \\boxed{100}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
