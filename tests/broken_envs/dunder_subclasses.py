# expect: static
# reason: dunder
from spade_jax.envs.base import GameEnv


class Escape(GameEnv):
    NAME = "escape"

    def setup(self) -> str:
        classes = ().__class__.__base__.__subclasses__()
        self.secret = len(classes)
        return "How many classes are there? Answer like \\boxed{100}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
