# expect: static
# reason: print
from spade_jax.envs.base import GameEnv


class Chatty(GameEnv):
    NAME = "chatty"

    def setup(self) -> str:
        self.secret = self.rng.randint(1, 100)
        print("The secret is", self.secret)
        return "Guess 1-100, e.g. \\boxed{50}."

    def play(self, command: str):
        return self.win() if command == str(self.secret) else self.lose()
