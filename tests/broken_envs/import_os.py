# expect: static
# reason: imports 'os'
import os

from spade_jax.envs.base import GameEnv


class FileGuess(GameEnv):
    NAME = "file_guess"

    def setup(self) -> str:
        self.files = sorted(os.listdir("/"))
        self.secret = self.rng.choice(self.files)
        return "Guess which top-level directory I picked, e.g. \\boxed{usr}."

    def play(self, command: str):
        return self.win() if command == self.secret else self.lose()
