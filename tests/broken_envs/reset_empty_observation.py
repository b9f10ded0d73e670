# expect: reset
# reason: empty
from spade_jax.envs.base import GameEnv


class Silent(GameEnv):
    NAME = "silent"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        intro = ""
        return intro

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
