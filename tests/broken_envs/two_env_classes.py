# expect: static
# reason: 2 environment classes
from spade_jax.envs.base import GameEnv


class Easy(GameEnv):
    NAME = "easy"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 10)
        return "Guess 1-10 in a box, e.g. \\boxed{5}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()


class Hard(GameEnv):
    NAME = "hard"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 1000)
        return "Guess 1-1000 in a box, e.g. \\boxed{500}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
