# expect: static
# reason: private attribute random\._os
import random

from spade_jax.envs.base import GameEnv


class Entropy(GameEnv):
    NAME = "entropy"

    def setup(self) -> str:
        self.secret = random._os.urandom(2).hex()
        return "Guess four hex digits, e.g. \\boxed{beef}."

    def play(self, command: str):
        return self.win() if command == self.secret else self.lose()
