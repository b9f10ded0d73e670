# expect: static
# reason: imports 'subprocess'
from subprocess import check_output

from spade_jax.envs.base import GameEnv


class ShellGuess(GameEnv):
    NAME = "shell_guess"

    def setup(self) -> str:
        self.secret = check_output(["whoami"]).decode().strip()
        return "Who am I? Answer like \\boxed{name}."

    def play(self, command: str):
        return self.win() if command == self.secret else self.lose()
