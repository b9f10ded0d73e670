# expect: static
# reason: __import__
from spade_jax.envs.base import GameEnv


class Sneaky(GameEnv):
    NAME = "sneaky"

    def setup(self) -> str:
        self.secret = __import__("os").getpid()
        return "Guess my process id, e.g. \\boxed{1234}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
