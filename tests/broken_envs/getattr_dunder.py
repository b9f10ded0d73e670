# expect: static
# reason: getattr\(\) with dunder name '__globals__'
from spade_jax.envs.base import GameEnv


class Reflective(GameEnv):
    NAME = "reflective"

    def setup(self) -> str:
        scope = getattr(self.play, "__globals__")
        self.secret = len(scope)
        return "Guess a number, e.g. \\boxed{5}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
