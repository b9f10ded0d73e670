# expect: static
# reason: __init__ does not accept max_turns
from spade_jax.envs.base import GameEnv


class Sized(GameEnv):
    NAME = "sized"

    def __init__(self, size=5):
        super().__init__(25)
        self.size = size

    def setup(self) -> str:
        self.secret = self.rng.randint(1, self.size)
        return f"Guess 1-{self.size}, e.g. \\boxed{{1}}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
