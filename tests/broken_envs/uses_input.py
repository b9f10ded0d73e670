# expect: static
# reason: 'input'
from spade_jax.envs.base import GameEnv


class Interactive(GameEnv):
    NAME = "interactive"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 100)
        return "Guess 1-100, e.g. \\boxed{50}."

    def play(self, command: str):
        confirm = input("Are you sure? ")
        if confirm != "y":
            return "Cancelled."
        return self.win() if command == str(self.secret) else self.lose()
