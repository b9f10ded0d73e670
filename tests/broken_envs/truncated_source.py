# expect: static
# reason: syntax error.*(never closed|EOF|unexpected|unterminated)
from spade_jax.envs.base import GameEnv


class Guess(GameEnv):
    NAME = "guess"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 200)
        return "Guess a number from 1 to 200, e.g. \\boxed{100}."

    def play(self, command: str):
        if command.isdigit() and int(command) == self.secret:
            return self.win("Correct!")
        return self.lose(f"Wrong, it was {self.secret
