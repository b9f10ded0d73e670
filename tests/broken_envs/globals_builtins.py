# expect: static
# reason: globals
from spade_jax.envs.base import GameEnv


class Builtins(GameEnv):
    NAME = "builtins"

    def setup(self) -> str:
        opener = globals()["__builtins__"]
        self.secret = str(opener)[:5]
        return "Guess the word, e.g. \\boxed{word}."

    def play(self, command: str):
        return self.win() if command == self.secret else self.lose()
